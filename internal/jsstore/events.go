package jsstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
	// newest caches NewestKeyClaim: when it looked, and what it found.
	newestMu                sync.Mutex
	newestChecked, newestAt time.Time
	newestOK                bool
	// decidedBelow is what the events appended from now on say in their
	// header HeaderDecidedBelow (nil: nothing, until SetDecidedBelow).
	decidedBelow atomic.Pointer[[]string]
}

// SetDecidedBelow makes the events appended from now on say that every
// command of ORDER_COMMANDS below seq was handled (events.HeaderDecidedBelow):
// the processors' consumer's acknowledgement floor plus one, the newest
// reading. A seq of 1 or less says nothing: the events carry no header.
// A reading lower than the one before is taken too (the consumer was made
// again from an earlier command, or a backup was restored): what the
// events say follows the consumer that delivers the commands now.
func (e *Events) SetDecidedBelow(seq uint64) {
	if seq <= 1 {
		e.decidedBelow.Store(nil)
		return
	}
	e.decidedBelow.Store(&[]string{strconv.FormatUint(seq, 10)})
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
// its event ID, if the event is the first under its condition: for an order
// ID with a nonce, the first of the order (an expected last sequence of 0 on
// all subjects of the order); for a keyed order ID (ADR 0010), the first of
// its idempotency key (on every keyed subject of the key), which makes the
// event the key's claim. A refusal means that another event came first:
// Append returns nil, with stored false; Event reads the order's event, and
// KeyEvent the key's. A publish unanswered within an attempt is sent again
// (PublishAll, which says which copy's answer counts).
func (e *Events) Append(ctx context.Context, k events.Kind, orderID string, data []byte) (stored bool, err error) {
	q := AppendRequest{Kind: k, OrderID: orderID, Data: data}
	e.claimingKeys([]AppendRequest{q})
	msg, err := e.appendMsg(ctx, q)
	if err != nil {
		return false, err
	}
	r := PublishAll(ctx, e.pub, []*nats.Msg{msg})[0]
	return appended(r.Ack, r.Err)
}

// AppendRequest is one event of AppendAll: Append(Ctx, Kind, OrderID, Data),
// Ctx carrying the trace of the message the event is about (nil: the
// call's). For a keyed order, After is the sequence of the key's last keyed
// event that the claim replaces (0: the key has none; a key whose last event
// is older than the result TTL is free again). It and AppendOutcome are
// aliases of unnamed struct types, the same types as the processor's (see
// ClaimRequest).
type AppendRequest = struct {
	Ctx     context.Context
	Kind    events.Kind
	OrderID string
	Data    []byte
	After   uint64
}

// AppendOutcome is the outcome of one event of AppendAll: what Append returns.
type AppendOutcome = struct {
	Stored bool
	Err    error
}

// AppendAll stores the events at once, each as Append does: their publishes
// go out together and are waited for once.
func (e *Events) AppendAll(ctx context.Context, reqs []AppendRequest) []AppendOutcome {
	e.claimingKeys(reqs)
	res := make([]AppendOutcome, len(reqs))
	msgs := make([]*nats.Msg, 0, len(reqs))
	sent := make([]int, 0, len(reqs))
	for i, q := range reqs {
		msg, err := e.appendMsg(ctx, q)
		if err != nil {
			res[i].Err = err
			continue
		}
		msgs = append(msgs, msg)
		sent = append(sent, i)
	}
	for j, p := range PublishAll(ctx, e.pub, msgs) {
		res[sent[j]].Stored, res[sent[j]].Err = appended(p.Ack, p.Err)
	}
	return res
}

// appendMsg is the message of an append, with its condition (see Append),
// the trace of q.Ctx (or of ctx), and what the processors had handled
// (SetDecidedBelow).
func (e *Events) appendMsg(ctx context.Context, q AppendRequest) (*nats.Msg, error) {
	filter, ok := events.OrderFilter(q.OrderID)
	if _, token, keyed := events.ParseKeyedOrderID(q.OrderID); keyed {
		filter = events.KeySubjects(token)
	} else if q.After != 0 {
		ok = false // only a key's claim replaces an event
	}
	if !ok {
		return nil, fmt.Errorf("append event: invalid order ID %q or condition", q.OrderID)
	}
	if q.Ctx != nil {
		ctx = q.Ctx
	}
	msg := eventMsg(ctx, events.EventSubject(q.Kind, q.OrderID), events.EventID(q.Kind, q.OrderID), q.After, filter, q.Data)
	if below := e.decidedBelow.Load(); below != nil {
		msg.Header[events.HeaderDecidedBelow] = *below // never written to
	}
	return msg, nil
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
// Data is the event as stored; Subject its keyed subject; Seq its sequence in
// ORDER_EVENTS, the expected last sequence of a claim that replaces it (a key
// free again after the result TTL); Stored when the server stored it. An
// alias of an unnamed struct type, the same as the processor's (see
// ClaimRequest).
type KeyEvent = struct {
	Data    []byte
	Subject string
	Seq     uint64
	Stored  time.Time
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

// claimingKeys makes NewestKeyClaim say now when reqs hold a keyed event:
// this process stores one.
func (e *Events) claimingKeys(reqs []AppendRequest) {
	for _, q := range reqs {
		if _, _, keyed := events.ParseKeyedOrderID(q.OrderID); keyed {
			e.newestMu.Lock()
			e.newestChecked, e.newestAt, e.newestOK = time.Now(), time.Now(), true
			e.newestMu.Unlock()
			return
		}
	}
}

// NewestKeyClaim is when the newest keyed event (ADR 0010) was stored; ok is
// false when there is none. It looks at most once a second (one read of the
// last message of the keyed subjects), counts the keyed events this process
// stores, and answers now on an error, so that callers read the keys
// themselves.
func (e *Events) NewestKeyClaim(ctx context.Context) (at time.Time, ok bool) {
	e.newestMu.Lock()
	defer e.newestMu.Unlock()
	now := time.Now()
	if now.Sub(e.newestChecked) < time.Second {
		return e.newestAt, e.newestOK
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := e.stream.GetLastMsgForSubject(ctx, events.KeyedEventSubjects)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		e.newestAt, e.newestOK = time.Time{}, false
	case err != nil:
		return now, true // not cached: the next call looks again
	default:
		e.newestAt, e.newestOK = m.Time, true
	}
	e.newestChecked = now
	return e.newestAt, e.newestOK
}

// FollowKeys calls f with the key token and the data of every keyed event
// (ADR 0010) stored after it returns, from one goroutine, until stop: the
// feed that answers the requests waiting for a keyed order's key, as
// Results.Watch does for the bucket's records (an ordered consumer, see
// there).
func (e *Events) FollowKeys(ctx context.Context, f func(token string, data []byte)) (stop func(), live func() error, err error) {
	return follow(ctx, e.js, events.EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.KeyedEventSubjects}, DeliverPolicy: jetstream.DeliverNewPolicy,
	}, func(m jetstream.Msg) {
		if token, ok := events.KeyTokenOfSubject(m.Subject()); ok {
			f(token, m.Data())
		}
	})
}

// KeyTokens calls f, from one goroutine, with the key token of every keyed
// event stored since since and the time it was stored, then returns: one
// headers-only ordered consumer from that time, read until nothing is
// pending (see Results.Keys).
func (e *Events) KeyTokens(ctx context.Context, since time.Time, f func(token string, at time.Time)) error {
	err := readAll(ctx, e.js, events.EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.KeyedEventSubjects}, DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime: &since, HeadersOnly: true,
	}, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		if token, ok := events.KeyTokenOfSubject(m.Subject()); ok {
			f(token, md.Timestamp)
		}
	})
	if err != nil {
		return fmt.Errorf("keys of %s: %w", events.EventStream, err)
	}
	return nil
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
	defer DeleteOrdered(e.js, events.EventStream, cons) // after the iterator's Stop below
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
		m, ok, err := NextPending(ctx, cons, it)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if !ok {
			return nil
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
