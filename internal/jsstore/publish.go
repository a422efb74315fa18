package jsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsonr"
)

// NewJetStream is a JetStream context on nc (for domain's JetStream, see
// JetStreamIn) whose publishes are
// FastPublish's (timeout bounds one whose context has no deadline). An
// asynchronous publish whose ack has not come within twice that is given up
// (jetstream.ErrAsyncPublishTimeout): nats.go keeps an unanswered one pending
// otherwise, until the connection is lost, and PublishMsgs sends a message
// again when its ack is late, so that the copies lost in a stream leader's
// failure would stay pending, up to nats.go's limit of 4,000 past which
// every asynchronous publish waits 200 ms and goes through PublishMsg.
func NewJetStream(nc *nats.Conn, domain string, timeout time.Duration) (jetstream.JetStream, error) {
	js, err := JetStreamIn(nc, domain, jetstream.WithPublishAsyncTimeout(2*timeout))
	if err != nil {
		return nil, err
	}
	return FastPublish(js, timeout), nil
}

// FastPublish returns js with a PublishMsg that does what nats.go's does (a
// request to the stream's subject; a no-responders answer is tried again
// twice, 250 ms apart, then is ErrNoStreamResponse; an API error comes back
// as a *jetstream.APIError; a context without a deadline gets js's default
// timeout) but decodes the ack with go-json instead of encoding/json: the
// ack's decoding was 3% of the server's CPU per order (a profile of the sync
// load, ADR 0008). One difference: when ctx ends while it waits to try
// again after no responders, it answers ErrNoStreamResponse (nobody received
// the message, so nothing was stored), where nats.go's answers ctx's error,
// which says nothing of what was stored. Calls with options go to js.
func FastPublish(js jetstream.JetStream, timeout time.Duration) jetstream.JetStream {
	return fastPublish{JetStream: js, timeout: timeout}
}

type fastPublish struct {
	jetstream.JetStream
	timeout time.Duration
}

// pubAckReply is the server's answer to a publish: an ack or an error.
type pubAckReply struct {
	Error     *jetstream.APIError `json:"error,omitempty"`
	Stream    string              `json:"stream"`
	Sequence  uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate,omitempty"`
	Domain    string              `json:"domain,omitempty"`
	Value     string              `json:"val,omitempty"`
}

// decodePubAck decodes an ack in one pass (jsonr) when it can, an error
// or anything else with go-json (FuzzPubAck: the same either way).
func decodePubAck(data []byte) (pubAckReply, error) {
	if ack, ok := readPubAck(data); ok {
		return ack, nil
	}
	var ack pubAckReply
	err := jsonr.Unmarshal(data, &ack)
	return ack, err
}

func readPubAck(data []byte) (ack pubAckReply, ok bool) {
	d := jsonr.New(data)
	m := d.Object()
	for name, more := d.Member(&m); more; name, more = d.Member(&m) {
		switch string(name) {
		case "stream":
			d.Once(&m, 0)
			ack.Stream = d.String()
		case "seq":
			d.Once(&m, 1)
			if n := d.Int(); n >= 0 {
				ack.Sequence = uint64(n)
			} else {
				d.Fail()
			}
		case "duplicate":
			d.Once(&m, 2)
			ack.Duplicate = d.Bool()
		case "domain":
			d.Once(&m, 3)
			ack.Domain = d.String()
		case "val":
			d.Once(&m, 4)
			ack.Value = d.String()
		default: // an error, or a field of a newer server
			d.Fail()
		}
	}
	return ack, d.End()
}

func (f fastPublish) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if len(opts) > 0 {
		return f.JetStream.PublishMsg(ctx, m, opts...)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	nc := f.Conn()
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		// A stream without a leader for a moment (an election) answers so.
		select {
		case <-ctx.Done():
			// Nothing was sent since nobody received the last try: the
			// caller's deadline is no sign that something was stored.
			return nil, jetstream.ErrNoStreamResponse
		case <-time.After(jetstream.DefaultPubRetryWait):
		}
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return nil, err
	}
	ack, err := decodePubAck(resp.Data)
	if err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return nil, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return &jetstream.PubAck{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate, Domain: ack.Domain, Value: ack.Value}, nil
}
