package processor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// Claims is where the processor claims idempotency keys.
//
// Claim creates key with claim if the key has no record, atomically: of any
// number of concurrent callers, on any number of processes, exactly one wins.
// A caller that loses gets the record that won. Save overwrites the key's
// record.
type Claims interface {
	Claim(ctx context.Context, key string, claim idempotency.Record) (holder idempotency.Record, won bool, err error)
	Save(ctx context.Context, key string, rec idempotency.Record) error
}

// EventStore stores events.
//
// Append stores data as the event of kind k about orderID, at most once per
// order: when a terminal event of the order is already stored it returns nil
// with stored false, so that a redelivered command cannot store a second
// event. Event reads the order's stored event.
type EventStore interface {
	Append(ctx context.Context, k events.Kind, orderID string, data []byte) (stored bool, err error)
	Event(ctx context.Context, orderID string) (data []byte, ok bool, err error)
}

// Deps are the processor's ports.
type Deps struct {
	Claims Claims
	Events EventStore
}

// Hooks let tests inject faults into the handling of a command. Production
// code leaves them nil. An error a hook returns fails this delivery (it is
// retried); a panic is a crash of the handler; blocking past the ack wait is
// a timeout.
type Hooks struct {
	// BeforeClaim runs before the decision is stored: a failure there leaves
	// the key free.
	BeforeClaim func(ctx context.Context, cmd events.CreateOrder, delivered int) error
	// AfterClaim runs once the key holds the command's decision (its stored
	// response), before the decision's event is stored.
	AfterClaim func(ctx context.Context, cmd events.CreateOrder, delivered int) error
}

// Config configures the processor.
type Config struct {
	// Hooks inject faults in tests; zero in production.
	Hooks Hooks
}

// Delivery is one delivery of a command.
type Delivery struct {
	// Data is the command as stored.
	Data []byte
	// Seq is the command's sequence in ORDER_COMMANDS; with the nonce it makes
	// the order ID.
	Seq uint64
	// OrderSeq, when not 0, is the sequence the order ID is made of instead of
	// Seq: a replayed command's original (events.HeaderReplayOf), so that the
	// order keeps its ID and the exactly-once rules hold across the replay.
	OrderSeq uint64
	// Delivered counts the deliveries of the command, 1 the first time.
	Delivered int
}

// Handler turns a CreateOrder command into OrderCreated or OrderRejected.
type Handler struct {
	cfg     Config
	deps    Deps
	now     func() time.Time
	logger  *slog.Logger
	decided *prometheus.CounterVec
}

// New returns the handler. reg receives orderly_commands_decided_total.
func New(cfg Config, deps Deps, reg prometheus.Registerer, logger *slog.Logger) (*Handler, error) {
	var errs []error
	if deps.Claims == nil || deps.Events == nil {
		errs = append(errs, errors.New("processor: nil dependency"))
	}
	if reg == nil || logger == nil {
		errs = append(errs, errors.New("processor: nil registerer or logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	decided := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderly_commands_decided_total",
		Help: "CreateOrder commands decided by the processor, by event kind.",
	}, []string{"kind"})
	if err := reg.Register(decided); err != nil {
		return nil, err
	}
	return &Handler{cfg: cfg, deps: deps, now: time.Now, logger: logger.With("component", "processor"), decided: decided}, nil
}

// Handle processes one delivery of a command. Its contract with the pipeline:
//   - nil: the terminal event of the order is stored; the command may be acked;
//   - a Permanent error: the command is malformed; no retry can succeed;
//   - any other error: retry later. Errors of the stores are returned as they
//     are, so that the pipeline tells an unavailable NATS (hold and retry,
//     never poison) from a failure of the command.
//
// The decision is made first and its stored response is the claim of the key
// (ADR 0009): one write decides the key and answers every request for it.
// The event follows. Every step is idempotent, so a redelivery after a crash
// at any point resumes the work: the claim of a redelivered command is its
// own (same order ID), from which the same decision is made again, byte for
// byte, and the event store keeps the first terminal event of an order.
func (h *Handler) Handle(ctx context.Context, d Delivery) error {
	cmd, orderID, err := decodeCommand(d)
	if err != nil {
		return Permanent(err)
	}
	if h.cfg.Hooks.BeforeClaim != nil {
		if err := h.cfg.Hooks.BeforeClaim(ctx, cmd, d.Delivered); err != nil {
			return err
		}
	}
	dec := Decide(cmd, orderID, h.now())
	holder, won, err := h.deps.Claims.Claim(ctx, cmd.KeyHash, dec.Record)
	if err != nil {
		return fmt.Errorf("claim key of %s: %w", orderID, err)
	}
	switch {
	case won:
	case holder.OrderID == orderID: // ours, from an earlier delivery
		dec = h.again(cmd, orderID, holder)
	case holder.Fingerprint == cmd.Fingerprint:
		dec = reject(cmd, orderID, h.now(), events.ReasonDuplicate, holder.OrderID,
			fmt.Sprintf("the idempotency key already belongs to order %s with the same request", holder.OrderID))
	default:
		dec = reject(cmd, orderID, h.now(), events.ReasonKeyReused, holder.OrderID,
			fmt.Sprintf("the idempotency key already belongs to order %s with a different request", holder.OrderID))
	}
	if dec.HoldsKey() && h.cfg.Hooks.AfterClaim != nil {
		if err := h.cfg.Hooks.AfterClaim(ctx, cmd, d.Delivered); err != nil {
			return err
		}
	}
	return h.settle(ctx, cmd, orderID, dec, holder, won)
}

// settle stores the decision's event and sees that the key's response and
// the order's stored event say the same: when the order had an event before
// this delivery won its key, and when the key holds a pending claim of a
// version before ADR 0009, which that version's projector would have
// completed.
func (h *Handler) settle(ctx context.Context, cmd events.CreateOrder, orderID string, dec Decision, holder idempotency.Record, won bool) error {
	stored, err := h.store(ctx, orderID, dec)
	if err != nil {
		return err
	}
	legacy := !won && holder.OrderID == orderID && !holder.Completed()
	switch {
	case legacy && stored:
		return h.respond(ctx, cmd.KeyHash, orderID, dec.Record)
	case legacy || won && !stored:
		return h.reconcile(ctx, cmd, orderID, dec)
	}
	return nil
}

// reconcile makes the key's response of the order's stored event. It runs
// when the order already had an event though this delivery won its key (an
// earlier delivery decided it, and that decision's response expired or was
// evicted before this redelivery: a processor down for longer than the
// result TTL with the command unacked), or held it with a pending claim of an
// earlier version. The event stands; the key's response is made of it, so
// that both say the same.
func (h *Handler) reconcile(ctx context.Context, cmd events.CreateOrder, orderID string, dec Decision) error {
	data, ok, err := h.deps.Events.Event(ctx, orderID)
	if err != nil {
		return fmt.Errorf("read the stored event of %s: %w", orderID, err)
	}
	if !ok {
		return nil // gone since (past the event retention): the new response stands
	}
	var ev struct {
		Time time.Time `json:"time"`
	}
	if err := gojson.Unmarshal(data, &ev); err != nil {
		return Permanent(fmt.Errorf("stored event of %s: %w", orderID, err))
	}
	for _, c := range append([]Decision{dec}, decisionsAt(cmd, orderID, ev.Time)...) {
		if bytes.Equal(c.Event, data) {
			return h.respond(ctx, cmd.KeyHash, orderID, c.Record)
		}
	}
	h.logger.ErrorContext(ctx, "the order's stored event is not a decision this version makes; its key's response is left as it is", "order_id", orderID)
	return nil
}

// respond stores rec as the key's response.
func (h *Handler) respond(ctx context.Context, key, orderID string, rec idempotency.Record) error {
	if err := h.deps.Claims.Save(ctx, key, rec); err != nil {
		return fmt.Errorf("store the response of %s: %w", orderID, err)
	}
	return nil
}

// again makes again the decision that holder, the key's record for this
// order, stores: the decision at the stored time, or the rejection the
// processor gives up with. A holder of an earlier version (a pending claim,
// or a response without the decision time) had its event decided anew, as
// that version did; a stored event is kept either way.
func (h *Handler) again(cmd events.CreateOrder, orderID string, holder idempotency.Record) Decision {
	at := holder.Decided()
	if at.IsZero() {
		return Decide(cmd, orderID, h.now())
	}
	want := holder.Encode()
	candidates := decisionsAt(cmd, orderID, at)
	for _, c := range candidates {
		if bytes.Equal(c.Record.Encode(), want) {
			return c
		}
	}
	// The rendering of responses changed since the record was stored: the
	// decision of the same kind stands (its times and IDs are the record's).
	h.logger.Warn("stored response differs from the decision made again", "order_id", orderID, "status", holder.Status)
	if decided := candidates[0]; holder.Status == http.StatusCreated || decided.Kind == events.KindRejected {
		return decided
	}
	return candidates[1]
}

// decisionsAt are the decisions the processor can have stored for the
// command at time at: its decision, and the rejection it gives up with.
func decisionsAt(cmd events.CreateOrder, orderID string, at time.Time) []Decision {
	return []Decision{Decide(cmd, orderID, at), givingUp(cmd, orderID, at)}
}

// store appends the decision's event and counts it; stored is false when the
// order already had an event.
func (h *Handler) store(ctx context.Context, orderID string, dec Decision) (stored bool, err error) {
	stored, err = h.deps.Events.Append(ctx, dec.Kind, orderID, dec.Event)
	if err != nil {
		return false, fmt.Errorf("store %s event of %s: %w", dec.Kind, orderID, err)
	}
	if stored {
		h.decided.WithLabelValues(string(dec.Kind)).Inc()
	}
	return stored, nil
}

// givingUp is the rejection of an order that cannot be processed.
func givingUp(cmd events.CreateOrder, orderID string, now time.Time) Decision {
	return reject(cmd, orderID, now, events.ReasonProcessingFailed, "",
		"the order could not be processed; use a new idempotency key to try again")
}

// GiveUp runs before the pipeline dead-letters a command that cannot be
// processed. When nobody holds the command's key, it stores an OrderRejected
// with reason processing_failed as the key's answer (422 order_rejected,
// replayed like any result) instead of leaving the key without one. When the
// key already holds this order's decision, that decision stands, and GiveUp
// stores its event: the response may have been sent. It is idempotent; an
// error keeps the command for another try.
func (h *Handler) GiveUp(ctx context.Context, d Delivery, cause error) error {
	cmd, orderID, err := decodeCommand(d)
	if err != nil {
		return nil // no order to answer for: the dead letter is all there is
	}
	dec := givingUp(cmd, orderID, h.now())
	holder, won, err := h.deps.Claims.Claim(ctx, cmd.KeyHash, dec.Record)
	if err != nil {
		return fmt.Errorf("claim key of %s: %w", orderID, err)
	}
	switch {
	case won:
	case holder.OrderID != orderID:
		return nil // another order answers for the key
	case holder.Completed() && !holder.Decided().IsZero():
		dec = h.again(cmd, orderID, holder)
	}
	// else a pending claim of an earlier version: rejected, as it would have been
	if err := h.settle(ctx, cmd, orderID, dec, holder, won); err != nil {
		return err
	}
	if dec.reason != events.ReasonProcessingFailed {
		h.logger.WarnContext(ctx, "decided order's event stored on giving up: its response was stored before the failure",
			"order_id", orderID, "kind", dec.Kind, "cause", cause)
		return nil
	}
	h.logger.ErrorContext(ctx, "order rejected as processing_failed", "order_id", orderID, "cause", cause)
	return nil
}

// decodeCommand decodes and checks a delivered command and computes its order ID.
func decodeCommand(d Delivery) (events.CreateOrder, string, error) {
	var cmd events.CreateOrder
	if err := gojson.Unmarshal(d.Data, &cmd); err != nil {
		return cmd, "", fmt.Errorf("undecodable command: %w", err)
	}
	var errs []error
	if cmd.Type != events.CreateOrderType {
		errs = append(errs, fmt.Errorf("unknown command type %q", cmd.Type))
	}
	if !events.ValidNonce(cmd.Nonce) {
		errs = append(errs, fmt.Errorf("invalid nonce %q", cmd.Nonce))
	}
	if !idempotency.ValidKeyHash(cmd.KeyHash) || cmd.Fingerprint == "" {
		errs = append(errs, errors.New("command without a valid key hash or fingerprint"))
	}
	if d.Seq == 0 {
		errs = append(errs, errors.New("command without a stream sequence"))
	}
	if err := errors.Join(errs...); err != nil {
		return cmd, "", err
	}
	seq := d.Seq
	if d.OrderSeq != 0 {
		seq = d.OrderSeq
	}
	return cmd, events.OrderID(seq, cmd.Nonce), nil
}
