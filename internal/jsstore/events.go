package jsstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/tracing"
)

// Events is ORDER_EVENTS. It is safe for concurrent use.
type Events struct {
	js     jetstream.JetStream
	pub    Publisher
	stream jetstream.Stream
}

// OpenEvents binds to the stream, which must exist (Topology.Ensure). Appends
// go through pub (js itself, or a Batcher).
func OpenEvents(ctx context.Context, js jetstream.JetStream, pub Publisher) (*Events, error) {
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", events.EventStream, err)
	}
	return &Events{js: js, pub: pub, stream: s}, nil
}

// Append stores data as the event of kind k about orderID, with Nats-Msg-Id =
// its event ID and an expected last sequence of 0 on all subjects of the
// order. A refusal because the order already has an event means the work is
// done: Append returns nil, with stored false (the order's event is the one
// stored before, which Event reads).
func (e *Events) Append(ctx context.Context, k events.Kind, orderID string, data []byte) (stored bool, err error) {
	if !events.ValidOrderID(orderID) {
		return false, fmt.Errorf("append event: invalid order ID %q", orderID)
	}
	msg := &nats.Msg{
		Subject: events.EventSubject(k, orderID),
		Header:  nats.Header{"Content-Type": []string{events.ContentType}},
		Data:    data,
	}
	SetMsgID(msg, events.EventID(k, orderID))
	SetExpectLastSubjectSeq(msg, 0, events.OrderSubjects(orderID))
	tracing.Inject(ctx, tracing.HeaderCarrier(msg.Header))
	ack, err := e.pub.PublishMsg(ctx, msg)
	switch {
	case IsWrongLastSequence(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return !ack.Duplicate, nil
}

// Event reads the terminal event of orderID; ok is false when it has none yet
// or the ID is not an order ID. It is one read of the order's own subjects.
// Errors are *StoreError.
func (e *Events) Event(ctx context.Context, orderID string) (data []byte, ok bool, err error) {
	if !events.ValidOrderID(orderID) {
		return nil, false, nil
	}
	m, err := e.stream.GetLastMsgForSubject(ctx, events.OrderSubjects(orderID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, storeErr(err)
	}
	return m.Data, true, nil
}

// FollowDecisions calls f with the order ID of every event stored after it
// returns, from one goroutine, until the feed is stopped. It reads headers
// only, through one ordered consumer (see Results.Watch).
func (e *Events) FollowDecisions(ctx context.Context, f func(orderID string)) (stop func(), live func() error, err error) {
	return follow(ctx, e.js, events.EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubjects}, DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true,
	}, func(m jetstream.Msg) {
		subj := m.Subject()
		f(subj[strings.LastIndexByte(subj, '.')+1:])
	})
}

// Each calls f with every stored event, oldest first, through an ordered
// consumer; total is the number of events when it started.
func (e *Events) Each(ctx context.Context, f func(data []byte, total uint64) error) error {
	cons, err := e.js.OrderedConsumer(ctx, events.EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubjects}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	total := info.NumPending
	if total == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if err := f(m.Data(), total); err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if md.NumPending == 0 {
			return nil
		}
	}
}
