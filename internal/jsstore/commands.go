package jsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonr"
	"github.com/orderly-dev/orderly/internal/tracing"
)

// Commands is ORDER_COMMANDS as the API uses it. It is safe for concurrent use.
type Commands struct {
	pub    Publisher
	stream jetstream.Stream
}

// OpenCommands binds to the stream, which must exist (Topology.Ensure).
// Commands are published through pub (js itself, or a Batcher).
func OpenCommands(ctx context.Context, js jetstream.JetStream, pub Publisher) (*Commands, error) {
	s, err := js.Stream(ctx, events.CommandStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", events.CommandStream, err)
	}
	return &Commands{pub: pub, stream: s}, nil
}

// Publish stores cmd with Nats-Msg-Id = cmd.KeyHash and returns its stream
// sequence; for a duplicate inside the window, the original's sequence.
// Publishing the same command again is safe (the duplicate ack tells the
// truth). Errors are *StoreError.
func (c *Commands) Publish(ctx context.Context, cmd events.CreateOrder) (seq uint64, duplicate bool, err error) {
	seq, duplicate, err = c.publish(ctx, cmd)
	return seq, duplicate, storeErr(err)
}

func (c *Commands) publish(ctx context.Context, cmd events.CreateOrder) (seq uint64, duplicate bool, err error) {
	// The trace context of the request travels in the command (for its events)
	// and in the headers (for whoever reads the stream).
	if cmd.TraceParent == "" {
		cmd.TraceParent, cmd.TraceState = tracing.TraceParent(ctx)
	}
	data, err := encodeCommand(cmd)
	if err != nil {
		return 0, false, err
	}
	msg := &nats.Msg{Subject: events.CommandSubject, Data: data, Header: nats.Header{}}
	tracing.Inject(ctx, tracing.HeaderCarrier(msg.Header))
	SetMsgID(msg, cmd.KeyHash)
	ack, err := c.pub.PublishMsg(ctx, msg)
	// On a replicated stream a duplicate racing its original is refused while
	// the original is being stored; a moment later it is acked as the duplicate
	// it is, with the original's sequence.
	for wait := 2 * time.Millisecond; IsDuplicateInProcess(err); wait = min(2*wait, 100*time.Millisecond) {
		select {
		case <-ctx.Done():
			return 0, false, err
		case <-time.After(wait):
		}
		ack, err = c.pub.PublishMsg(ctx, msg)
	}
	if err != nil {
		return 0, false, err
	}
	return ack.Sequence, ack.Duplicate, nil
}

// Command reads the command stored at seq; jetstream.ErrMsgNotFound when
// there is none. Errors are *StoreError.
func (c *Commands) Command(ctx context.Context, seq uint64) (events.CreateOrder, error) {
	cmd, err := c.command(ctx, seq)
	return cmd, storeErr(err)
}

func (c *Commands) command(ctx context.Context, seq uint64) (events.CreateOrder, error) {
	m, err := c.stream.GetMsg(ctx, seq)
	if err != nil {
		return events.CreateOrder{}, err
	}
	if m.Subject != events.CommandSubject {
		return events.CreateOrder{}, jetstream.ErrMsgNotFound
	}
	cmd, err := jsonr.DecodeCreateOrder(m.Data)
	if err != nil {
		return events.CreateOrder{}, fmt.Errorf("command at %d: %w", seq, err)
	}
	return cmd, nil
}

// FindCommand reads the command of orderID (either form): the one stored at
// the sequence the ID names, if it makes that ID (its nonce, or its key's
// token, matches). ok is false when there is none. Errors are
// *StoreError.
func (c *Commands) FindCommand(ctx context.Context, orderID string) (cmd events.CreateOrder, ok bool, err error) {
	seq, valid := events.OrderSeq(orderID)
	if !valid {
		return events.CreateOrder{}, false, nil
	}
	cmd, err = c.command(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.CreateOrder{}, false, nil
	}
	if err != nil {
		return events.CreateOrder{}, false, storeErr(err)
	}
	return cmd, cmd.HasOrderID(orderID), nil
}
