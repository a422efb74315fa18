// Package streams reads and writes ORDER_COMMANDS and ORDER_EVENTS for the API:
// it is the NATS side of app.Commands and app.EventLog.
package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/natsx"
)

// Log is ORDER_COMMANDS and ORDER_EVENTS as the API uses them: it implements
// app.Commands and app.EventLog.
type Log struct {
	js       jetstream.JetStream
	pub      natsx.Publisher
	commands jetstream.Stream
	events   jetstream.Stream
}

// OpenLog binds to the streams, which must exist. Commands are published
// through pub (js itself, or a batcher on ORDER_COMMANDS).
func OpenLog(ctx context.Context, js jetstream.JetStream, pub natsx.Publisher) (*Log, error) {
	commands, err := js.Stream(ctx, events.CommandStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", events.CommandStream, err)
	}
	evs, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", events.EventStream, err)
	}
	return &Log{js: js, pub: pub, commands: commands, events: evs}, nil
}

// Publish stores cmd with Nats-Msg-Id = cmd.KeyHash.
func (l *Log) Publish(ctx context.Context, cmd events.CreateOrder) (app.Published, error) {
	data, err := gojson.Marshal(cmd)
	if err != nil {
		return app.Published{}, err
	}
	msg := &nats.Msg{Subject: events.CommandSubject, Data: data}
	natsx.SetMsgID(msg, cmd.KeyHash)
	ack, err := l.pub.PublishMsg(ctx, msg)
	// On a replicated stream a duplicate racing its original is refused while
	// the original is being stored; a moment later it is acked as the duplicate
	// it is, with the original's sequence.
	for wait := 2 * time.Millisecond; natsx.IsDuplicateInProcess(err); wait = min(2*wait, 100*time.Millisecond) {
		select {
		case <-ctx.Done():
			return app.Published{}, err
		case <-time.After(wait):
		}
		ack, err = l.pub.PublishMsg(ctx, msg)
	}
	if err != nil {
		return app.Published{}, err
	}
	return app.Published{Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// Command reads the command stored at seq.
func (l *Log) Command(ctx context.Context, seq uint64) (events.CreateOrder, error) {
	m, err := l.commands.GetMsg(ctx, seq)
	if err != nil {
		return events.CreateOrder{}, err
	}
	if m.Subject != events.CommandSubject {
		return events.CreateOrder{}, jetstream.ErrMsgNotFound
	}
	var cmd events.CreateOrder
	if err := gojson.Unmarshal(m.Data, &cmd); err != nil {
		return events.CreateOrder{}, fmt.Errorf("command at %d: %w", seq, err)
	}
	return cmd, nil
}

// FindCommand reads the command of orderID: the one stored at the sequence the
// ID names, if its nonce matches. ok is false when there is none.
func (l *Log) FindCommand(ctx context.Context, orderID string) (events.CreateOrder, bool, error) {
	seq, nonce, ok := events.ParseOrderID(orderID)
	if !ok {
		return events.CreateOrder{}, false, nil
	}
	cmd, err := l.Command(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.CreateOrder{}, false, nil
	}
	if err != nil {
		return events.CreateOrder{}, false, err
	}
	return cmd, cmd.Nonce == nonce, nil
}

// Event reads the terminal event of orderID; ok is false when it has none yet.
func (l *Log) Event(ctx context.Context, orderID string) ([]byte, bool, error) {
	m, err := l.events.GetLastMsgForSubject(ctx, events.OrderSubjects(orderID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return m.Data, true, nil
}

// OrderEvents returns the stored events of orderID, oldest first.
func (l *Log) OrderEvents(ctx context.Context, orderID string) ([][]byte, error) {
	var out [][]byte
	filter := events.OrderSubjects(orderID)
	for seq := uint64(1); ; {
		m, err := l.events.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m.Data)
		seq = m.Sequence + 1
	}
}
