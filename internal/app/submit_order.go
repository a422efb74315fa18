package app

import (
	"context"
	"fmt"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/attempt"
)

// SubmitOrder is a validated POST /v1/orders.
type SubmitOrder struct {
	// Tenant owns the request.
	Tenant string
	// KeyHash is the hashed tenant-scoped idempotency key.
	KeyHash string
	// Fingerprint is the hash of the canonical request.
	Fingerprint string
	// Request is the decoded order.
	Request events.OrderRequest
	// Wait is how long to wait for the decision on a new order before answering
	// Accepted; 0 answers Accepted as soon as the command is stored.
	Wait time.Duration
	// WaitForPending is how long a retry of a pending request waits for the
	// original's decision before answering InProgress; 0 answers at once.
	WaitForPending time.Duration
}

// OutcomeKind says how the request ended.
type OutcomeKind int

const (
	// Completed: Result holds the stored response.
	Completed OutcomeKind = iota + 1
	// Accepted: the command is stored; the decision is not known yet (202).
	Accepted
	// InProgress: a retry arrived while the original is still pending (409).
	InProgress
)

// Outcome is the answer to SubmitOrder.
type Outcome struct {
	Kind OutcomeKind
	// OrderID is the order the key belongs to.
	OrderID string
	// Record holds the stored response when Kind is Completed.
	Record idempotency.Record
	// Replayed is true when Result was stored for an earlier request.
	Replayed bool
}

// Submit handles a POST /v1/orders. The three layers against duplicates meet
// here: a key with a stored result is answered from it without publishing (a
// key the process knows to be new is not read); the
// broker drops a command whose key it saw inside the duplicate window; and the
// processor's claim turns any command that still slips through into a
// rejection that names the holder (see package processor).
func (s *Service) Submit(ctx context.Context, in SubmitOrder) (Outcome, error) {
	out, err := s.submit(ctx, in)
	if err == nil && out.Kind == Completed && s.deps.Durable != nil && s.deps.Durable.SyncedSince(out.Record.Seen) {
		// A replay of a result this process knew before the last sync
		// started: the sync made it durable, no new one is needed.
		return out, nil
	}
	return out, s.durable(ctx, err, ErrOutcomeUnknown)
}

func (s *Service) submit(ctx context.Context, in SubmitOrder) (Outcome, error) {
	if r, ok := s.deps.Cache.CachedResult(in.KeyHash); ok {
		return s.existing(ctx, in, r, nil)
	}
	var updates <-chan idempotency.Record
	if in.Wait > 0 || in.WaitForPending > 0 {
		c, cancel := s.deps.Watcher.WatchResult(in.KeyHash)
		defer cancel()
		updates = c
	}
	// A key the process knows to be new is published without reading it first.
	// Its view lags the store by a delivery: a record stored in that moment is
	// missed, as one stored just after a read would be, and the same two
	// layers cover both (the broker's window drops a retry of a command stored
	// in it; the processor's claim rejects any other, and the answer is the
	// holder's).
	if !s.deps.Cache.KnownNew(in.KeyHash) {
		r, found, err := s.result(ctx, in.KeyHash)
		if err != nil {
			return Outcome{}, err
		}
		if found {
			return s.existing(ctx, in, r, updates)
		}
	}

	cmd := events.CreateOrder{
		Type:        events.CreateOrderType,
		Tenant:      in.Tenant,
		KeyHash:     in.KeyHash,
		Fingerprint: in.Fingerprint,
		AcceptedAt:  s.now().UTC(),
		Request:     in.Request,
	}
	if s.keyed.Load() {
		cmd.IDForm = events.IDFormKeyed
	} else {
		cmd.Nonce = s.newNonce()
	}
	seq, duplicate, err := s.publish(ctx, cmd)
	if err != nil {
		return Outcome{}, err
	}
	if duplicate {
		return s.duplicate(ctx, in, seq, updates)
	}
	orderID, ok := cmd.OrderIDAt(seq)
	if !ok {
		return Outcome{}, fmt.Errorf("command of key %s stored at %d makes no order ID", in.KeyHash, seq)
	}
	return s.await(ctx, in, orderID, updates, in.Wait, false)
}

// ownCommand reports whether the command stored at seq is cmd itself: the
// same key, request and acceptance time (set once per request, to the
// nanosecond), and the same nonce and ID form. Then the request is the
// key's first, not a retry of itself. A read that fails says no: the
// request is then answered as a retry of the stored command.
func (s *Service) ownCommand(ctx context.Context, cmd events.CreateOrder, seq uint64) bool {
	var orig events.CreateOrder
	err := s.call(ctx, "read original command", func(ctx context.Context) (err error) {
		orig, err = s.deps.Commands.Command(ctx, seq)
		return err
	})
	return err == nil && orig.Tenant == cmd.Tenant && orig.KeyHash == cmd.KeyHash && orig.Fingerprint == cmd.Fingerprint &&
		orig.AcceptedAt.Equal(cmd.AcceptedAt) && orig.Nonce == cmd.Nonce && orig.IDForm == cmd.IDForm
}

// result reads key from ORDER_RESULTS and caches a completed result.
func (s *Service) result(ctx context.Context, key string) (r idempotency.Record, found bool, err error) {
	err = s.call(ctx, "read result", func(ctx context.Context) (err error) {
		r, found, err = s.deps.Results.Get(ctx, key)
		return err
	})
	if err != nil {
		return r, false, err
	}
	if found {
		s.deps.Cache.Remember(key, r)
	}
	return r, found, nil
}

// duplicate answers a command the broker dropped: the original is in flight or
// done. The projection knows once a processor claimed it; before that, the
// original command itself says whose it is.
func (s *Service) duplicate(ctx context.Context, in SubmitOrder, seq uint64, updates <-chan idempotency.Record) (Outcome, error) {
	r, found, err := s.result(ctx, in.KeyHash)
	if err != nil {
		return Outcome{}, err
	}
	if found {
		return s.existing(ctx, in, r, updates)
	}
	var orig events.CreateOrder
	err = s.call(ctx, "read original command", func(ctx context.Context) (err error) {
		orig, err = s.deps.Commands.Command(ctx, seq)
		return err
	})
	if err != nil {
		return Outcome{}, err
	}
	origID, ok := orig.OrderIDAt(seq)
	if !ok {
		return Outcome{}, fmt.Errorf("the original command at %d makes no order ID", seq)
	}
	if orig.Fingerprint != in.Fingerprint {
		return Outcome{}, &KeyReusedError{OrderID: origID}
	}
	return s.pending(ctx, in, origID, updates)
}

// existing answers from the key's value in ORDER_RESULTS.
func (s *Service) existing(ctx context.Context, in SubmitOrder, r idempotency.Record, updates <-chan idempotency.Record) (Outcome, error) {
	if r.Fingerprint != in.Fingerprint {
		return Outcome{}, &KeyReusedError{OrderID: r.OrderID}
	}
	if r.Completed() {
		return Outcome{Kind: Completed, OrderID: r.OrderID, Record: r, Replayed: true}, nil
	}
	return s.pending(ctx, in, r.OrderID, updates)
}

// pending answers a retry whose original is not decided yet: at once with
// InProgress, or after waiting for the original when the client asked to wait.
func (s *Service) pending(ctx context.Context, in SubmitOrder, orderID string, updates <-chan idempotency.Record) (Outcome, error) {
	if in.WaitForPending <= 0 || updates == nil {
		return Outcome{Kind: InProgress, OrderID: orderID}, nil
	}
	return s.await(ctx, in, orderID, updates, in.WaitForPending, true)
}

// await waits up to wait for the key's stored response. replay says whether the
// request is a retry (its answer is a replay of the original's).
func (s *Service) await(ctx context.Context, in SubmitOrder, orderID string, updates <-chan idempotency.Record, wait time.Duration, replay bool) (Outcome, error) {
	notYet := Outcome{Kind: Accepted, OrderID: orderID}
	if replay {
		notYet.Kind = InProgress
	}
	if wait <= 0 || updates == nil {
		return notYet, nil
	}
	// One timer for both: the next poll, or the end of the wait. The store
	// is read directly now and then: often while the watcher is down (its
	// updates would be missed), rarely as a safety net otherwise; and once
	// more at the end, as the watch may lag behind the store.
	end := time.Now().Add(wait)
	timer := time.NewTimer(min(s.pollInterval(), wait))
	defer timer.Stop()
	for {
		select {
		case r := <-updates:
			if r.Completed() {
				return s.decided(in, orderID, r, replay)
			}
		case <-timer.C:
			if r, found, err := s.peek(ctx, in.KeyHash); err == nil && found && r.Completed() {
				return s.decided(in, orderID, r, replay)
			}
			left := time.Until(end)
			if left <= 0 {
				return notYet, nil
			}
			timer.Reset(min(s.pollInterval(), left))
		case <-ctx.Done():
			return notYet, nil
		case <-s.draining:
			return notYet, nil
		}
	}
}

// peek is one read of a key's record, without retries: a waiter reads again
// at its next poll.
func (s *Service) peek(ctx context.Context, key string) (idempotency.Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, attempt.First)
	defer cancel()
	r, found, err := s.deps.Results.Get(ctx, key)
	if err == nil && found {
		s.deps.Cache.Remember(key, r)
	}
	return r, found, err
}

func (s *Service) decided(in SubmitOrder, orderID string, r idempotency.Record, replay bool) (Outcome, error) {
	if r.Fingerprint != in.Fingerprint {
		return Outcome{}, &KeyReusedError{OrderID: r.OrderID}
	}
	// Another order holds the key when our command lost the processor's claim to
	// an earlier one: the answer is that order's, a replay.
	return Outcome{Kind: Completed, OrderID: r.OrderID, Record: r, Replayed: replay || r.OrderID != orderID}, nil
}
