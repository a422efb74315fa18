package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
)

// Projection is what one event means for the reads: the order as GET shows it,
// and the stored response of its idempotency key.
type Projection struct {
	// OrderID and Order are the order as GET /v1/orders/{id} shows it.
	OrderID string
	Order   Order
	// Key and Result are the ORDER_RESULTS record; Result is nil when the event
	// does not answer for its idempotency key (a duplicate of another order).
	Key    string
	Result *Result
	// At is the event time.
	At time.Time
}

// ErrUnknownType is returned by Project for an event type it does not know.
var ErrUnknownType = errors.New("unknown event type")

// Project computes the read-model records of an event. It is a pure function of
// the event, so projecting an event twice, or again in a rebuild, writes the
// same bytes.
func Project(data []byte) (Projection, error) {
	var ev events.RawEvent
	if err := gojson.Unmarshal(data, &ev); err != nil {
		return Projection{}, fmt.Errorf("decode event: %w", err)
	}
	switch ev.Type {
	case events.OrderCreatedType:
		var d events.OrderCreated
		if err := gojson.Unmarshal(ev.Data, &d); err != nil {
			return Projection{}, fmt.Errorf("decode %s: %w", ev.Type, err)
		}
		o := CreatedOrder(d)
		r := CreatedResult(d, o.Body)
		return Projection{OrderID: d.OrderID, Order: o, Key: d.IdempotencyKeyHash, Result: &r, At: ev.Time}, nil
	case events.OrderRejectedType:
		var d events.OrderRejected
		if err := gojson.Unmarshal(ev.Data, &d); err != nil {
			return Projection{}, fmt.Errorf("decode %s: %w", ev.Type, err)
		}
		p := Projection{OrderID: d.OrderID, Order: RejectedOrder(d), Key: d.IdempotencyKeyHash, At: ev.Time}
		if d.HoldsKey() {
			r := RejectedResult(d)
			p.Result = &r
		}
		return p, nil
	default:
		return Projection{}, fmt.Errorf("%w %q", ErrUnknownType, ev.Type)
	}
}

// Projector is the watermill handler that keeps ORDER_RESULTS up to date with
// ORDER_EVENTS: it stores the response of each order's idempotency key. It is
// idempotent: a redelivered event writes the same record again. It returns an error (so the message is redelivered) only when
// a write failed; an event it cannot read is logged, counted and acked, because
// no retry can make it readable.
type Projector struct {
	store  *Store
	logger *slog.Logger
	// Skipped counts events that were acked without a projection.
	Skipped func(reason string)
}

// NewProjector returns a projector writing to store.
func NewProjector(store *Store, logger *slog.Logger) (*Projector, error) {
	if store == nil {
		return nil, errors.New("projector: nil store")
	}
	return &Projector{store: store, logger: logger.With("component", "projector"), Skipped: func(string) {}}, nil
}

// Handle projects one event.
func (p *Projector) Handle(msg *message.Message) error {
	proj, err := Project(msg.Payload)
	if errors.Is(err, ErrUnknownType) {
		p.logger.Debug("event type not projected", "err", err)
		p.Skipped("unknown_type")
		return nil
	}
	if err != nil {
		p.logger.Error("event cannot be projected; acked without projection", "msg_id", msg.UUID, "err", err)
		p.Skipped("undecodable")
		return nil
	}
	if proj.Result == nil {
		return nil // a duplicate of another order: its key answers with that order
	}
	if time.Since(proj.At) >= p.store.resultTTL {
		// The result has expired: its key may already belong to a newer order.
		return nil
	}
	ctx, cancel := context.WithTimeout(msg.Context(), 10*time.Second)
	defer cancel()
	return p.store.SaveResult(ctx, proj.Key, *proj.Result)
}
