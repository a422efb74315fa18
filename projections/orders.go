package projections

import (
	"context"
	"fmt"

	"github.com/orderly-dev/orderly/idempotency"
)

// EventGetter reads the terminal event of an order; ok is false while it has
// none (or the ID is not an order ID).
type EventGetter interface {
	Event(ctx context.Context, orderID string) (data []byte, ok bool, err error)
}

// Orders is the read model of orders: rendered from each order's terminal
// event on read, with Project, so that a GET shows exactly the bytes of the
// stored 201 (ADR 0004: no per-order read model is stored).
type Orders struct{ events EventGetter }

// NewOrders returns the read model over events.
func NewOrders(events EventGetter) *Orders { return &Orders{events: events} }

// Decided returns the order as its terminal event shows it, and the event as
// stored; ok is false while the order has no event.
func (o *Orders) Decided(ctx context.Context, orderID string) (order idempotency.Order, event []byte, ok bool, err error) {
	data, ok, err := o.events.Event(ctx, orderID)
	if err != nil || !ok {
		return idempotency.Order{}, nil, false, err
	}
	p, err := Project(data)
	if err != nil {
		return idempotency.Order{}, nil, false, fmt.Errorf("order %s: %w", orderID, err)
	}
	if p.OrderID != orderID {
		// Stored under this order's subject by someone else than orderly.
		return idempotency.Order{}, nil, false, fmt.Errorf("order %s: its event is of order %q", orderID, p.OrderID)
	}
	return p.Order, data, true, nil
}
