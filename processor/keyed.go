package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsonr"
)

// Keyed orders (ADR 0010): the order's event is its idempotency key's claim.
// It is stored only if the key has no keyed event, or only one decided
// longer than the result TTL ago (the key is free again); one write decides
// the key and records the order, and nothing else is stored. An order that
// loses its key stores nothing: the holder answers for it.

// item is one command of a batch: its slot i in the batch, its context,
// the command, its order's ID, the decision made, its delivery count.
type item struct {
	i         int
	ctx       context.Context
	cmd       events.CreateOrder
	orderID   string
	dec       Decision
	delivered int
}

// keyedWork is one keyed command of a batch.
type keyedWork = item

// maxKeyRounds bounds the claims of one key in one delivery: each round
// after the first follows a holder whose time was up, which a newer order
// can take first; the delivery is tried again later past this.
const maxKeyRounds = 4

// claimKeys decides the keyed commands ws of a batch, each one's error in
// errs: their claims are stored together (one wait), and each refused one
// then reads its key's holder: its own event (a redelivery), an order whose
// time is up (claimed again after it), or the order that holds the key.
func (h *Handler) claimKeys(ctx context.Context, ws []keyedWork, errs []error) {
	if len(ws) == 0 {
		return
	}
	ws = h.heldElsewhere(ctx, ws, errs)
	reqs := make([]AppendRequest, len(ws))
	for j, w := range ws {
		reqs[j] = AppendRequest{Ctx: w.ctx, Kind: w.dec.Kind, OrderID: w.orderID, Data: w.dec.Event}
	}
	for j, o := range h.appendAll(ctx, reqs) {
		w := ws[j]
		held := o.Err == nil && o.Stored
		if o.Err == nil && !o.Stored {
			o.Stored, held, o.Err = h.claimAfterHolder(w.ctx, w)
		}
		if _, err := h.counted(w.orderID, w.dec, o); err != nil {
			errs[w.i] = err
			continue
		}
		if held && h.cfg.Hooks.AfterClaim != nil {
			errs[w.i] = h.cfg.Hooks.AfterClaim(w.ctx, w.cmd, w.delivered)
		}
	}
}

// giveUpKeyed is GiveUp for a keyed command: its rejection as
// processing_failed claims the key, unless another order holds it; when the
// key holds the order's own decision, that stands.
func (h *Handler) giveUpKeyed(ctx context.Context, w keyedWork, cause error) error {
	errs := make([]error, 1)
	w.i = 0
	if len(h.heldElsewhere(ctx, []keyedWork{w}, errs)) == 0 {
		if errors.Is(errs[0], idempotency.ErrBadRecord) {
			h.leftUndecided(ctx, w.orderID, errs[0])
			return nil
		}
		return errs[0] // lost, or its record could not be read
	}
	stored, err := h.deps.Events.Append(ctx, w.dec.Kind, w.orderID, w.dec.Event)
	held := err == nil && stored
	if err == nil && !stored {
		stored, held, err = h.claimAfterHolder(ctx, w)
	}
	if _, err := h.counted(w.orderID, w.dec, AppendOutcome{Stored: stored, Err: err}); err != nil {
		return err
	}
	switch {
	case stored:
		h.logger.ErrorContext(ctx, "order rejected as processing_failed", "order_id", w.orderID, "cause", cause)
	case held:
		h.logger.WarnContext(ctx, "the order's decided event stands on giving up", "order_id", w.orderID, "cause", cause)
	}
	return nil
}

// heldElsewhere drops from ws the commands whose key a record of the claims
// store gives to another order (of the nonce form, or of a version before
// keyed IDs), as lost, and those whose record cannot be read, with their
// error. The records are read together, and not at all while the store can
// tell that it holds none.
func (h *Handler) heldElsewhere(ctx context.Context, ws []keyedWork, errs []error) []keyedWork {
	if hint, ok := h.deps.Claims.(RecordsHint); ok && !hint.MayHoldRecords(ctx) {
		return ws
	}
	holders := make([]string, len(ws))
	var wg sync.WaitGroup
	for j, w := range ws {
		wg.Go(func() {
			rec, ok, err := h.deps.Claims.Get(w.ctx, w.cmd.KeyHash)
			switch {
			case errors.Is(err, idempotency.ErrBadRecord):
				// As for a claim of the nonce form: no retry reads it.
				errs[w.i] = Permanent(fmt.Errorf("read the record of the key of %s: %w", w.orderID, err))
			case err != nil:
				errs[w.i] = fmt.Errorf("read the record of the key of %s: %w", w.orderID, err)
			case ok && rec.OrderID != w.orderID:
				holders[j] = rec.OrderID
			}
		})
	}
	wg.Wait()
	kept := ws[:0]
	for j, w := range ws {
		switch {
		case errs[w.i] != nil:
		case holders[j] != "":
			h.lost(w, holders[j])
		default:
			kept = append(kept, w)
		}
	}
	return kept
}

// claimAfterHolder follows a refused claim: it reads the key's last keyed
// event and, when its order's time is up, claims the key after it. held is
// true when the key holds w's decision: stored now, or by an earlier
// delivery (stored false); when both are false another order holds the key
// and w lost: nothing is stored for it.
func (h *Handler) claimAfterHolder(ctx context.Context, w keyedWork) (stored, held bool, err error) {
	for range maxKeyRounds {
		ev, ok, err := h.deps.Events.KeyEvent(ctx, w.cmd.KeyHash)
		if err != nil {
			return false, false, fmt.Errorf("read the holder of the key of %s: %w", w.orderID, err)
		}
		var after uint64
		if ok {
			holder := events.OrderIDOfSubject(ev.Subject)
			if holder == w.orderID {
				return false, true, nil // ours: an earlier delivery stored it
			}
			if !h.expired(ev) {
				h.lost(w, holder)
				return false, false, nil
			}
			after = ev.Seq
		}
		// The key is free: its holder's time is up (or, with no keyed event
		// at all, the refusal was of an event of the key removed since).
		o := h.appendAll(ctx, []AppendRequest{{Ctx: ctx, Kind: w.dec.Kind, OrderID: w.orderID, Data: w.dec.Event, After: after}})[0]
		if o.Err != nil || o.Stored {
			return o.Stored, o.Stored, o.Err
		}
	}
	return false, false, fmt.Errorf("claim the key of %s: its holder kept changing", w.orderID)
}

// expired reports whether the order of the key's event ev was decided
// longer than the result TTL ago, by the event's own time (the time the
// API's answers count from), or by when it was stored.
func (h *Handler) expired(ev KeyEvent) bool {
	at := ev.Stored
	var e struct {
		Time time.Time `json:"time"`
	}
	if jsonr.Unmarshal(ev.Data, &e) == nil && !e.Time.IsZero() {
		at = e.Time
	}
	return h.now().Sub(at) >= h.cfg.ResultTTL
}

// lost records that w's order lost its key to holder: it stores no event
// (the key's next claim expects the holder's as the key's last); its
// requests are answered by the holder, and a read of its ID answers 303 to
// the holder.
func (h *Handler) lost(w keyedWork, holder string) {
	h.decided.WithLabelValues(kindNone).Inc()
	h.logger.InfoContext(w.ctx, "order lost its idempotency key to another order; no event stored",
		"order_id", w.orderID, "holder", holder)
}

// KeyClaimsHint is implemented by event stores that can tell cheaply when
// their newest keyed event was stored: commands of the nonce form skip the
// read of their key's keyed holder while no keyed event is younger than the
// result TTL (a deployment that never made keyed orders never reads).
type KeyClaimsHint interface {
	NewestKeyClaim(ctx context.Context) (at time.Time, ok bool)
}

// keyedHolders marks the commands of the nonce form in ws whose key a keyed
// order holds (ADR 0010): such a command must not claim the key in the
// claims store, where the keyed order left no record; it is rejected naming
// the holder, as when it loses a claim. Commands whose holder cannot be read
// are dropped with their error. The keyed events are read together.
func (h *Handler) keyedHolders(ctx context.Context, ws []work, errs []error) []work {
	if hint, ok := h.deps.Events.(KeyClaimsHint); ok {
		at, any := hint.NewestKeyClaim(ctx)
		if !any || h.now().Sub(at) >= h.cfg.ResultTTL {
			return ws
		}
	}
	var wg sync.WaitGroup
	for j := range ws {
		w := &ws[j]
		wg.Go(func() {
			ev, ok, err := h.deps.Events.KeyEvent(w.ctx, w.cmd.KeyHash)
			switch {
			case err != nil:
				errs[w.i] = fmt.Errorf("read the keyed holder of the key of %s: %w", w.orderID, err)
			case ok && !h.expired(ev):
				var e struct {
					Data struct {
						RequestFingerprint string `json:"request_fingerprint"`
					} `json:"data"`
				}
				_ = jsonr.Unmarshal(ev.Data, &e)
				w.keyHolder = &idempotency.Record{OrderID: events.OrderIDOfSubject(ev.Subject), Fingerprint: e.Data.RequestFingerprint}
			}
		})
	}
	wg.Wait()
	kept := ws[:0]
	for _, w := range ws {
		if errs[w.i] == nil {
			kept = append(kept, w)
		}
	}
	return kept
}
