// Package admin is the work of the operator's tools: reading and replaying
// dead letters (`orderly dlq`), and reading and evicting a key's record
// (`orderly keys`). It runs over JetStream with the operator's credentials:
// replays go to events.ReplaySubject, which only the operator may publish.
//
// The rules it keeps:
//   - a replayed command keeps its order ID (events.HeaderReplayOf), so the
//     exactly-once rules hold across the replay: an order already decided
//     stays decided, and a key never gets a second order;
//   - a key is evicted only while it is pending, and only if it has not
//     changed since it was read (a processor deciding the order wins).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/pipeline"
	"github.com/orderly-dev/orderly/projections"
)

// DeadLetter is one message of ORDER_COMMANDS_DLQ, decoded as far as it goes.
type DeadLetter struct {
	// Seq is its sequence in ORDER_COMMANDS_DLQ; Time when it was written.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Reason is why it was dead-lettered (header reason_poisoned).
	Reason string `json:"reason"`
	// OriginalSeq is where the command was in ORDER_COMMANDS; Delivered how
	// often it was delivered before it was given up.
	OriginalSeq uint64 `json:"original_seq"`
	Delivered   int    `json:"delivered"`
	// OrderID is the command's order (empty when the command cannot be
	// decoded); Tenant and KeyHash name its key.
	OrderID string `json:"order_id,omitempty"`
	Tenant  string `json:"tenant,omitempty"`
	KeyHash string `json:"key_hash,omitempty"`
	// Decision is what the order is now: "created", "rejected: <reason>", or
	// "undecided".
	Decision string `json:"decision"`

	orderSeq uint64
	header   nats.Header
	data     []byte
}

// DeadLetters calls f with every dead letter, oldest first.
func DeadLetters(ctx context.Context, js jetstream.JetStream, f func(DeadLetter) error) error {
	s, err := js.Stream(ctx, events.DeadLetterStream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", events.DeadLetterStream, err)
	}
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted: replayed, or removed by hand
		}
		if err != nil {
			return err
		}
		dl, err := decode(ctx, evs, m)
		if err != nil {
			return err
		}
		if err := f(dl); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetterAt reads the dead letter at seq.
func DeadLetterAt(ctx context.Context, js jetstream.JetStream, seq uint64) (DeadLetter, error) {
	s, err := js.Stream(ctx, events.DeadLetterStream)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("stream %s: %w", events.DeadLetterStream, err)
	}
	if seq == 0 { // sequences start at 1; the server's answer to 0 says nothing useful
		return DeadLetter{}, errors.New("no dead letter at 0: sequences start at 1 (orderly dlq list shows them)")
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, fmt.Errorf("no dead letter at %d", seq)
	}
	if err != nil {
		return DeadLetter{}, err
	}
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		return DeadLetter{}, err
	}
	return decode(ctx, evs, m)
}

func decode(ctx context.Context, evs *jsstore.Events, m *jetstream.RawStreamMsg) (DeadLetter, error) {
	dl := DeadLetter{Seq: m.Sequence, Time: m.Time, Reason: m.Header.Get(pipeline.HeaderReason), header: m.Header, data: m.Data,
		Decision: "undecided"}
	dl.OriginalSeq, _ = strconv.ParseUint(m.Header.Get(pipeline.HeaderSeq), 10, 64)
	dl.Delivered, _ = strconv.Atoi(m.Header.Get(pipeline.HeaderDelivered))
	dl.orderSeq = dl.OriginalSeq
	if v, err := strconv.ParseUint(m.Header.Get(events.HeaderReplayOf), 10, 64); err == nil && v > 0 {
		dl.orderSeq = v // a replay dead-lettered again: its order is the first one's
	}
	var cmd events.CreateOrder
	orderID, ok := "", false
	if err := json.Unmarshal(m.Data, &cmd); err == nil && dl.orderSeq != 0 {
		orderID, ok = cmd.OrderIDAt(dl.orderSeq)
	}
	if !ok {
		dl.Decision = "undecodable"
		return dl, nil
	}
	dl.OrderID, dl.Tenant, dl.KeyHash = orderID, cmd.Tenant, cmd.KeyHash
	decision, err := Decision(ctx, evs, dl.OrderID)
	if err != nil {
		return dl, err
	}
	dl.Decision = decision
	return dl, nil
}

// Decision says what orderID is now: "created", "rejected: <reason>", or
// "undecided" when it has no terminal event.
func Decision(ctx context.Context, evs *jsstore.Events, orderID string) (string, error) {
	data, ok, err := evs.Event(ctx, orderID)
	if err != nil || !ok {
		return "undecided", err
	}
	d, err := decisionOf(data)
	if err != nil {
		return "", fmt.Errorf("event of %s: %w", orderID, err)
	}
	return d, nil
}

// decisionOf says what a stored event decided: "created" or "rejected:
// <reason>".
func decisionOf(data []byte) (string, error) {
	var e events.Event[struct {
		Reason string `json:"reason"`
	}]
	if err := json.Unmarshal(data, &e); err != nil {
		return "", err
	}
	if e.Type == events.OrderRejectedType {
		return "rejected: " + e.Data.Reason, nil
	}
	return "created", nil
}

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Wait is how long to wait for the replayed order's decision; 0 does not wait.
	Wait time.Duration
	// Keep leaves the dead letter in place; otherwise it is deleted once its
	// order is decided (or, for an order already decided, at once).
	Keep bool
}

// ReplayResult says what a replay did.
type ReplayResult struct {
	Seq      uint64 `json:"seq"`
	OrderID  string `json:"order_id,omitempty"`
	Outcome  string `json:"outcome"`
	Decision string `json:"decision"`
	Deleted  bool   `json:"deleted"`
}

// Replay publishes dl's command again on the replay subject, under its order
// ID, unless its order is already decided (the exactly-once rules would make
// the replay change nothing). It waits for the decision up to opts.Wait.
func Replay(ctx context.Context, js jetstream.JetStream, dl DeadLetter, opts ReplayOptions) (ReplayResult, error) {
	res := ReplayResult{Seq: dl.Seq, OrderID: dl.OrderID, Decision: dl.Decision}
	if dl.OrderID == "" {
		res.Outcome = "skipped: the command cannot be decoded, so no processor can take it; inspect it with nats stream get " + events.DeadLetterStream + " " + strconv.FormatUint(dl.Seq, 10)
		return res, nil
	}
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		return res, err
	}
	if res.Decision, err = Decision(ctx, evs, dl.OrderID); err != nil {
		return res, err
	}
	if res.Decision != "undecided" {
		res.Outcome = "not replayed: the order is already decided, and an order is decided once"
		if strings.HasSuffix(res.Decision, events.ReasonProcessingFailed) {
			res.Outcome += " (its client was answered 422 processing_failed and retries with a new key)"
		}
		return res, deleteUnlessKept(ctx, js, dl.Seq, opts, &res)
	}
	h := nats.Header{}
	for k, v := range dl.header {
		switch {
		case strings.HasPrefix(strings.ToLower(k), "nats-"), strings.HasPrefix(k, "Orderly-"), k == pipeline.HeaderReason:
		default:
			h[k] = v
		}
	}
	h.Set(events.HeaderReplayOf, strconv.FormatUint(dl.orderSeq, 10))
	// Replaying one dead letter twice within the duplicate window stores it
	// once; later, the order ID keeps the second replay from deciding twice.
	h.Set(jetstream.MsgIDHeader, "replay."+events.DeadLetterStream+"."+strconv.FormatUint(dl.Seq, 10))
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: events.ReplaySubject, Header: h, Data: dl.data}); err != nil {
		return res, fmt.Errorf("replay %d: %w", dl.Seq, err)
	}
	res.Outcome = "replayed"
	if opts.Wait <= 0 {
		return res, nil
	}
	deadline := time.Now().Add(opts.Wait)
	for res.Decision == "undecided" && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if res.Decision, err = Decision(ctx, evs, dl.OrderID); err != nil {
			return res, err
		}
	}
	if res.Decision == "undecided" {
		res.Outcome = "replayed; not decided within " + opts.Wait.String() + " (is a processor running?)"
		return res, nil
	}
	return res, deleteUnlessKept(ctx, js, dl.Seq, opts, &res)
}

func deleteUnlessKept(ctx context.Context, js jetstream.JetStream, seq uint64, opts ReplayOptions, res *ReplayResult) error {
	if opts.Keep {
		return nil
	}
	s, err := js.Stream(ctx, events.DeadLetterStream)
	if err != nil {
		return err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("delete dead letter %d: %w", seq, err)
	}
	res.Deleted = true
	return nil
}

// Key is what a key holds, for `orderly keys get`.
type Key struct {
	Tenant  string `json:"tenant,omitempty"`
	KeyHash string `json:"key_hash"`
	// Found is false when the key has no record: never used, expired, or evicted.
	Found bool `json:"found"`
	// Source is where the key's answer is: ORDER_RESULTS, or ORDER_EVENTS
	// for an order with a keyed ID, whose event is its key's claim.
	Source      string            `json:"source,omitempty"`
	State       idempotency.State `json:"state,omitempty"`
	OrderID     string            `json:"order_id,omitempty"`
	Fingerprint string            `json:"fingerprint,omitempty"`
	Response    *Response         `json:"response,omitempty"`
	Stored      time.Time         `json:"stored,omitzero"`
	Expires     time.Time         `json:"expires,omitzero"`
	Revision    uint64            `json:"revision,omitempty"`
	Decision    string            `json:"decision,omitempty"`
	// Queued says that the order's command still waits in ORDER_COMMANDS for
	// a processor: the key is pending because nobody got to it yet.
	Queued bool `json:"queued,omitempty"`
}

// Response is a stored response.
type Response struct {
	Status      int    `json:"status"`
	Location    string `json:"location,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Body        string `json:"body"`
}

// LookUp reads the record of keyHash (idempotency.KeyHash of the tenant and
// the key) and the decision of its order.
func LookUp(ctx context.Context, js jetstream.JetStream, keyHash string) (Key, error) {
	k := Key{KeyHash: keyHash}
	if !idempotency.ValidKeyHash(keyHash) {
		return k, fmt.Errorf("%q is not a key hash", keyHash)
	}
	results, err := jsstore.OpenResults(ctx, js, js)
	if err != nil {
		return k, err
	}
	rec, rev, ok, err := results.Revision(ctx, keyHash)
	if err != nil {
		return k, err
	}
	if !ok {
		return lookUpKeyed(ctx, js, k, results.TTL())
	}
	k.Source = events.ResultsBucket
	k.Found, k.State, k.OrderID, k.Fingerprint, k.Stored, k.Revision = true, rec.State, rec.OrderID, rec.Fingerprint, rec.Stored, rev
	if ttl := results.TTL(); ttl > 0 {
		k.Expires = rec.Stored.Add(ttl)
	}
	if rec.Completed() {
		k.Response = &Response{Status: rec.Status, Location: rec.Location, ContentType: rec.ContentType, Body: string(rec.Body)}
	}
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		return k, err
	}
	if k.Decision, err = Decision(ctx, evs, rec.OrderID); err != nil || k.Decision != "undecided" {
		return k, err
	}
	k.Queued, err = queued(ctx, js, rec.OrderID)
	return k, err
}

// lookUpKeyed reads the key's answer from its last keyed event (ADR 0010):
// a keyed order's event is its key's claim, and it writes no record. An
// event older than the result TTL holds the key no more (not found).
func lookUpKeyed(ctx context.Context, js jetstream.JetStream, k Key, ttl time.Duration) (Key, error) {
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		return k, err
	}
	ev, ok, err := evs.KeyEvent(ctx, k.KeyHash)
	if err != nil || !ok {
		return k, err
	}
	p, err := projections.Project(ev.Data)
	if err != nil {
		return k, fmt.Errorf("the keyed event of the key: %w", err)
	}
	if p.Record == nil || p.Key != k.KeyHash || ttl > 0 && time.Since(p.At) >= ttl {
		return k, nil
	}
	rec := p.Record
	k.Found, k.Source, k.State, k.OrderID, k.Fingerprint, k.Stored = true, events.EventStream, rec.State, rec.OrderID, rec.Fingerprint, p.At
	if ttl > 0 {
		k.Expires = p.At.Add(ttl)
	}
	k.Response = &Response{Status: rec.Status, Location: rec.Location, ContentType: rec.ContentType, Body: string(rec.Body)}
	k.Decision, err = decisionOf(ev.Data)
	return k, err
}

// queued tells whether orderID's command is still in ORDER_COMMANDS and not
// yet acknowledged by the processors' consumer.
func queued(ctx context.Context, js jetstream.JetStream, orderID string) (bool, error) {
	seq, ok := events.OrderSeq(orderID)
	if !ok {
		return false, nil
	}
	s, err := js.Stream(ctx, events.CommandStream)
	if err != nil {
		return false, err
	}
	if _, err := s.GetMsg(ctx, seq); errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	c, err := s.Consumer(ctx, jsstore.ProcessorConsumer)
	if err != nil {
		return false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.AckFloor.Stream < seq, nil
}

// ErrNotPending refuses to evict a key whose response is stored: its
// clients' retries are answered from it, and evicting it would let the next
// retry make a second order.
var ErrNotPending = errors.New("the key has a stored response: evicting it would let a retry make a second order")

// ErrDecided refuses to evict a pending key whose order is decided: the
// projector is about to store its response.
var ErrDecided = errors.New("the key's order is decided and its response about to be stored; wait for it")

// ErrQueued refuses to evict a key whose order's command still waits for a
// processor: it will be decided, and after an eviction it would become a
// duplicate of whatever the next request with the key makes.
var ErrQueued = errors.New("the key's order is still waiting for a processor (its command is in ORDER_COMMANDS); start or fix the processors instead")

// Evict deletes k's record if it is still pending, its order undecided and
// its command no longer waiting, and unchanged since LookUp read it, so that
// the next request with the key is processed as new.
func Evict(ctx context.Context, js jetstream.JetStream, k Key) error {
	if err := Evictable(k); err != nil {
		return err
	}
	results, err := jsstore.OpenResults(ctx, js, js)
	if err != nil {
		return err
	}
	return results.Evict(ctx, k.KeyHash, k.Revision)
}

// Evictable says why k may not be evicted, or nil.
func Evictable(k Key) error {
	switch {
	case !k.Found:
		return errors.New("the key has no record: there is nothing to evict")
	case k.State != idempotency.StatePending:
		return ErrNotPending
	case k.Decision != "undecided":
		return fmt.Errorf("%w (order %s: %s)", ErrDecided, k.OrderID, k.Decision)
	case k.Queued:
		return ErrQueued
	}
	return nil
}
