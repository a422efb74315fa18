package processor

import (
	"context"
	"errors"
	"fmt"
	gojson "github.com/goccy/go-json"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/wm"
	"github.com/orderly-dev/orderly/projections"
)

// Claims is where the processor claims idempotency keys.
//
// Claim creates key with claim if the key has no value, atomically: of any
// number of concurrent callers, on any number of processes, exactly one wins.
// A caller that loses gets the value that won.
type Claims interface {
	Claim(ctx context.Context, key string, claim projections.Result) (existing projections.Result, won bool, err error)
}

// EventStore stores events.
//
// Append stores data as the event of kind k about orderID, at most once per
// order: it returns nil when this or another terminal event of the order is
// already stored, so that a redelivered command cannot store a second event.
type EventStore interface {
	Append(ctx context.Context, k events.Kind, orderID string, data []byte) error
}

// Hooks let tests inject faults into the handling of a command. Production
// code leaves them nil.
type Hooks struct {
	// AfterClaim runs once the key is claimed for the command's order, before
	// the decision is stored. An error fails this delivery (it is retried); a
	// panic is a crash of the handler; blocking past the ack wait is a timeout.
	AfterClaim func(ctx context.Context, cmd events.CreateOrder, delivered int) error
}

// createOrderHandler turns a CreateOrder command into OrderCreated or OrderRejected.
type createOrderHandler struct {
	claims     Claims
	store      EventStore
	maxDeliver int
	timeout    time.Duration
	now        func() time.Time
	logger     *slog.Logger
	decided    func(kind events.Kind, reason string)
	hooks      Hooks
}

// NewCreateOrderHandler returns the handler of CreateOrder. maxDeliver is the
// consumer's delivery limit: a transient failure on the last delivery is treated
// as permanent, so the command is dead-lettered instead of dropped.
func NewCreateOrderHandler(claims Claims, store EventStore, maxDeliver int, timeout time.Duration, logger *slog.Logger) (*createOrderHandler, error) {
	var errs []error
	if claims == nil {
		errs = append(errs, errors.New("nil claims"))
	}
	if store == nil {
		errs = append(errs, errors.New("nil event store"))
	}
	if maxDeliver < 1 {
		errs = append(errs, fmt.Errorf("max deliver must be at least 1, got %d", maxDeliver))
	}
	if timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout must be positive, got %s", timeout))
	}
	if logger == nil {
		errs = append(errs, errors.New("nil logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create order handler: %w", err)
	}
	return &createOrderHandler{
		claims: claims, store: store, maxDeliver: maxDeliver, timeout: timeout,
		now: time.Now, logger: logger, decided: func(events.Kind, string) {},
	}, nil
}

// Handle processes one delivery of a command. Its contract with the router:
//   - nil: the terminal event of the order is stored; the command may be acked;
//   - a Permanent error: no retry can succeed; the command goes to the
//     dead-letter stream (the router's poison middleware), and, when this
//     order holds the key, an OrderRejected with reason processing_failed is
//     stored first, so that the key has an answer (422 order_rejected);
//   - any other error: retry later (the command is naked and redelivered);
//     on the consumer's last delivery it is treated as permanent.
//
// Every step is idempotent, so a redelivery after a crash at any point resumes
// the work: the claim of a redelivered command is its own (same order ID), and
// the event store keeps the first terminal event of an order.
func (h *createOrderHandler) Handle(msg *message.Message) error {
	cmd, err := decodeCommand(msg.Payload)
	if err != nil {
		return Permanent(err)
	}
	seq := wm.StreamSeq(msg)
	if seq == 0 {
		return Permanent(errors.New("command without a stream sequence"))
	}
	orderID := events.OrderID(seq, cmd.Nonce)
	ctx, cancel := context.WithTimeout(msg.Context(), h.timeout)
	defer cancel()
	delivered := wm.Delivered(msg)
	holds, err := h.handle(ctx, cmd, orderID, delivered)
	if err == nil {
		return nil
	}
	if !IsPermanent(err) && delivered < h.maxDeliver {
		return err
	}
	err = fmt.Errorf("giving up on %s after %d deliveries: %w", orderID, delivered, err)
	if holds {
		kind, data := reject(cmd, orderID, h.now(), events.ReasonProcessingFailed, "", "the order could not be processed; use a new idempotency key to try again")
		if aerr := h.store.Append(ctx, kind, orderID, data); aerr != nil {
			h.logger.Error("dead-lettering a command whose key stays pending", "order_id", orderID, "err", errors.Join(err, aerr))
		} else {
			h.decided(kind, events.ReasonProcessingFailed)
		}
	}
	h.logger.Error("command dead-lettered", "order_id", orderID, "err", err)
	return Permanent(err)
}

// handle claims the key and stores the decision. holds reports whether the
// order holds the key (so that a failure may store a rejection for it).
func (h *createOrderHandler) handle(ctx context.Context, cmd events.CreateOrder, orderID string, delivered int) (holds bool, err error) {
	claim := projections.Result{State: projections.StatePending, OrderID: orderID, Fingerprint: cmd.Fingerprint}
	holder, won, err := h.claims.Claim(ctx, cmd.KeyHash, claim)
	if err != nil {
		return false, fmt.Errorf("claim key of %s: %w", orderID, err)
	}
	holds = won || holder.OrderID == orderID // ours, or ours from an earlier delivery
	if holds && h.hooks.AfterClaim != nil {
		if err := h.hooks.AfterClaim(ctx, cmd, delivered); err != nil {
			return true, err
		}
	}
	var kind events.Kind
	var data []byte
	switch {
	case holds:
		kind, data = Decide(cmd, orderID, h.now())
	case holder.Fingerprint == cmd.Fingerprint:
		kind, data = reject(cmd, orderID, h.now(), events.ReasonDuplicate, holder.OrderID,
			fmt.Sprintf("the idempotency key already belongs to order %s with the same request", holder.OrderID))
	default:
		kind, data = reject(cmd, orderID, h.now(), events.ReasonKeyReused, holder.OrderID,
			fmt.Sprintf("the idempotency key already belongs to order %s with a different request", holder.OrderID))
	}
	if err := h.store.Append(ctx, kind, orderID, data); err != nil {
		return holds, fmt.Errorf("store %s event of %s: %w", kind, orderID, err)
	}
	h.decided(kind, "")
	return holds, nil
}

func decodeCommand(b []byte) (events.CreateOrder, error) {
	var cmd events.CreateOrder
	if err := gojson.Unmarshal(b, &cmd); err != nil {
		return cmd, fmt.Errorf("undecodable command: %w", err)
	}
	var errs []error
	if cmd.Type != events.CreateOrderType {
		errs = append(errs, fmt.Errorf("unknown command type %q", cmd.Type))
	}
	if !events.ValidNonce(cmd.Nonce) {
		errs = append(errs, fmt.Errorf("invalid nonce %q", cmd.Nonce))
	}
	if cmd.KeyHash == "" || cmd.Fingerprint == "" {
		errs = append(errs, errors.New("command without key hash or fingerprint"))
	}
	return cmd, errors.Join(errs...)
}

// Decide is the business decision on the command of order orderID, which holds
// its key: OrderCreated, or OrderRejected when the order breaks a rule. It
// returns the event kind and the encoded event.
func Decide(cmd events.CreateOrder, orderID string, now time.Time) (events.Kind, []byte) {
	r := cmd.Request
	sum, err := r.Sum()
	switch {
	case err != nil:
		return reject(cmd, orderID, now, events.ReasonInvalidOrder, "", err.Error())
	case len(r.Items) == 0:
		return reject(cmd, orderID, now, events.ReasonInvalidOrder, "", "the order has no items")
	case r.Total != nil && *r.Total != sum:
		return reject(cmd, orderID, now, events.ReasonTotalMismatch, "",
			fmt.Sprintf("total %d does not equal the sum of quantity*unit_price over the items, %d", *r.Total, sum))
	}
	e := events.NewEvent(events.OrderCreatedType, events.KindCreated, orderID, now, events.OrderCreated{
		OrderID:            orderID,
		Tenant:             cmd.Tenant,
		CustomerID:         r.CustomerID,
		Currency:           r.Currency,
		Items:              r.Items,
		Total:              sum,
		IdempotencyKeyHash: cmd.KeyHash,
		RequestFingerprint: cmd.Fingerprint,
		AcceptedAt:         cmd.AcceptedAt.UTC(),
		CreatedAt:          now.UTC(),
	})
	return events.KindCreated, mustJSON(e)
}

func reject(cmd events.CreateOrder, orderID string, now time.Time, reason, duplicateOf, detail string) (events.Kind, []byte) {
	e := events.NewEvent(events.OrderRejectedType, events.KindRejected, orderID, now, events.OrderRejected{
		OrderID:            orderID,
		Tenant:             cmd.Tenant,
		Reason:             reason,
		Detail:             detail,
		DuplicateOf:        duplicateOf,
		Request:            cmd.Request,
		IdempotencyKeyHash: cmd.KeyHash,
		RequestFingerprint: cmd.Fingerprint,
		AcceptedAt:         cmd.AcceptedAt.UTC(),
		RejectedAt:         now.UTC(),
	})
	return events.KindRejected, mustJSON(e)
}

func mustJSON(v any) []byte {
	b, err := gojson.Marshal(v)
	if err != nil { // plain data: cannot happen
		panic(err)
	}
	return b
}
