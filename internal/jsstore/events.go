package jsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// Append stores data as the event of kind k about orderID (either form of
// order ID: a keyed one's event goes on its keyed subject), with Nats-Msg-Id =
// its event ID and an expected last sequence of 0 on all subjects of the
// order. A refusal because the order already has an event means the work is
// done: Append returns nil, with stored false (the order's event is the one
// stored before, which Event reads).
func (e *Events) Append(ctx context.Context, k events.Kind, orderID string, data []byte) (stored bool, err error) {
	filter, ok := events.OrderFilter(orderID)
	if !ok {
		return false, fmt.Errorf("append event: invalid order ID %q", orderID)
	}
	return e.publish(ctx, events.EventSubject(k, orderID), events.EventID(k, orderID), 0, filter, data)
}

// AppendRequest is one event of AppendAll: Append(Ctx, Kind, OrderID, Data),
// Ctx carrying the trace of the message the event is about (nil: the
// call's). It and AppendOutcome are aliases of unnamed struct types, the same
// types as the processor's (see ClaimRequest).
type AppendRequest = struct {
	Ctx     context.Context
	Kind    events.Kind
	OrderID string
	Data    []byte
}

// AppendOutcome is the outcome of one event of AppendAll: what Append returns.
type AppendOutcome = struct {
	Stored bool
	Err    error
}

// AppendAll stores the events at once, each as Append does: their publishes
// go out together and are waited for once.
func (e *Events) AppendAll(ctx context.Context, reqs []AppendRequest) []AppendOutcome {
	res := make([]AppendOutcome, len(reqs))
	msgs := make([]*nats.Msg, 0, len(reqs))
	sent := make([]int, 0, len(reqs))
	for i, q := range reqs {
		filter, ok := events.OrderFilter(q.OrderID)
		if !ok {
			res[i].Err = fmt.Errorf("append event: invalid order ID %q", q.OrderID)
			continue
		}
		qctx := q.Ctx
		if qctx == nil {
			qctx = ctx
		}
		msgs = append(msgs, eventMsg(qctx, events.EventSubject(q.Kind, q.OrderID), events.EventID(q.Kind, q.OrderID), 0, filter, q.Data))
		sent = append(sent, i)
	}
	for j, p := range PublishAll(ctx, e.pub, msgs) {
		res[sent[j]].Stored, res[sent[j]].Err = appended(p.Ack, p.Err)
	}
	return res
}

// publish stores data on subject with message ID id if the last message under
// filter is at sequence after; stored is false when it is not, or when the
// same message was stored just before (a duplicate).
func (e *Events) publish(ctx context.Context, subject, id string, after uint64, filter string, data []byte) (stored bool, err error) {
	return appended(e.pub.PublishMsg(ctx, eventMsg(ctx, subject, id, after, filter, data)))
}

// eventMsg is the event data on subject with message ID id, expecting the
// last message under filter at sequence after, with the trace of ctx.
func eventMsg(ctx context.Context, subject, id string, after uint64, filter string, data []byte) *nats.Msg {
	msg := &nats.Msg{
		Subject: subject,
		Header:  nats.Header{"Content-Type": []string{events.ContentType}},
		Data:    data,
	}
	SetMsgID(msg, id)
	SetExpectLastSubjectSeq(msg, after, filter)
	tracing.Inject(ctx, tracing.HeaderCarrier(msg.Header))
	return msg
}

// appended is the outcome of an event's publish: stored, refused by its
// condition (not stored, no error), or failed.
func appended(ack *jetstream.PubAck, err error) (stored bool, _ error) {
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
	filter, ok := events.OrderFilter(orderID)
	if !ok {
		return nil, false, nil
	}
	m, err := e.stream.GetLastMsgForSubject(ctx, filter)
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
		f(events.OrderIDOfSubject(m.Subject()))
	})
}

// KeyEvent is the last keyed event of an idempotency key (ADR 0010).
type KeyEvent struct {
	// Data is the event as stored.
	Data []byte
	// Subject is its keyed subject.
	Subject string
	// Seq is its sequence in ORDER_EVENTS: the expected last sequence of a
	// claim that replaces it (a key free again after the result TTL).
	Seq uint64
	// Stored is when the server stored it.
	Stored time.Time
}

// ClaimKey stores data as the keyed event of kind k about the order whose
// command is stored at seq, only if the last keyed event of keyHash is at
// sequence after (0: the key has none): the key's claim and the order's event
// in one write (ADR 0010, step 1; nothing calls it yet). stored is false when
// another event of the key came first: KeyEvent reads it. Through a Batcher
// it is safe too: two claims of one key never share an atomic batch (see
// oneConditionEach).
func (e *Events) ClaimKey(ctx context.Context, k events.Kind, keyHash string, seq uint64, data []byte, after uint64) (stored bool, err error) {
	token, ok := events.KeyToken(keyHash)
	if !ok {
		return false, fmt.Errorf("claim key: invalid key hash %q", keyHash)
	}
	return e.publish(ctx, events.KeyedEventSubject(k, token, seq), events.EventID(k, events.KeyedOrderID(seq, token)), after, events.KeySubjects(token), data)
}

// KeyEvent reads the last keyed event of keyHash; ok is false when the key
// has none. It is one read of the key's subjects.
func (e *Events) KeyEvent(ctx context.Context, keyHash string) (ev KeyEvent, ok bool, err error) {
	token, valid := events.KeyToken(keyHash)
	if !valid {
		return KeyEvent{}, false, nil
	}
	m, err := e.stream.GetLastMsgForSubject(ctx, events.KeySubjects(token))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return KeyEvent{}, false, nil
	}
	if err != nil {
		return KeyEvent{}, false, storeErr(err)
	}
	return KeyEvent{Data: m.Data, Subject: m.Subject, Seq: m.Sequence, Stored: m.Time}, true, nil
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
