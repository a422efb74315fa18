package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// A caller that loses gets the record that won.
type Claims interface {
	Claim(ctx context.Context, key string, claim idempotency.Record) (holder idempotency.Record, won bool, err error)
}

// EventStore stores events.
//
// Append stores data as the event of kind k about orderID, at most once per
// order: it returns nil when this or another terminal event of the order is
// already stored, so that a redelivered command cannot store a second event.
type EventStore interface {
	Append(ctx context.Context, k events.Kind, orderID string, data []byte) error
}

// Deps are the processor's ports.
type Deps struct {
	Claims Claims
	Events EventStore
}

// Hooks let tests inject faults into the handling of a command. Production
// code leaves them nil.
type Hooks struct {
	// AfterClaim runs once the key is claimed for the command's order, before
	// the decision is stored. An error fails this delivery (it is retried); a
	// panic is a crash of the handler; blocking past the ack wait is a timeout.
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
// Every step is idempotent, so a redelivery after a crash at any point resumes
// the work: the claim of a redelivered command is its own (same order ID), and
// the event store keeps the first terminal event of an order.
func (h *Handler) Handle(ctx context.Context, d Delivery) error {
	cmd, orderID, err := decodeCommand(d)
	if err != nil {
		return Permanent(err)
	}
	holder, won, err := h.deps.Claims.Claim(ctx, cmd.KeyHash, idempotency.Pending(orderID, cmd.Fingerprint))
	if err != nil {
		return fmt.Errorf("claim key of %s: %w", orderID, err)
	}
	holds := won || holder.OrderID == orderID // ours, or ours from an earlier delivery
	if holds && h.cfg.Hooks.AfterClaim != nil {
		if err := h.cfg.Hooks.AfterClaim(ctx, cmd, d.Delivered); err != nil {
			return err
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
	if err := h.deps.Events.Append(ctx, kind, orderID, data); err != nil {
		return fmt.Errorf("store %s event of %s: %w", kind, orderID, err)
	}
	h.decided.WithLabelValues(string(kind)).Inc()
	return nil
}

// GiveUp runs before the pipeline dead-letters a command that cannot be
// processed. When the command's order holds its key (or nobody does yet), it
// stores an OrderRejected with reason processing_failed, so that the key has
// an answer (422 order_rejected, replayed like any result) instead of staying
// pending. It is idempotent; an error keeps the command for another try.
func (h *Handler) GiveUp(ctx context.Context, d Delivery, cause error) error {
	cmd, orderID, err := decodeCommand(d)
	if err != nil {
		return nil // no order to answer for: the dead letter is all there is
	}
	holder, won, err := h.deps.Claims.Claim(ctx, cmd.KeyHash, idempotency.Pending(orderID, cmd.Fingerprint))
	if err != nil {
		return fmt.Errorf("claim key of %s: %w", orderID, err)
	}
	if !won && holder.OrderID != orderID {
		return nil // another order answers for the key
	}
	kind, data := reject(cmd, orderID, h.now(), events.ReasonProcessingFailed, "",
		"the order could not be processed; use a new idempotency key to try again")
	if err := h.deps.Events.Append(ctx, kind, orderID, data); err != nil {
		return fmt.Errorf("store %s event of %s: %w", kind, orderID, err)
	}
	h.decided.WithLabelValues(string(kind)).Inc()
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
