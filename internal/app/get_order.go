package app

import (
	"bytes"
	"context"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// Order returns the order orderID of tenant: rendered from its event once
// decided, else from its command while pending. With wait > 0 and a pending
// order it waits up to wait for the decision (long polling) and returns the
// state it has then. An ID that is not an order ID is ErrNotFound, without
// any read.
func (s *Service) Order(ctx context.Context, tenant, orderID string, wait time.Duration) (idempotency.Order, error) {
	if !events.ValidOrderID(orderID) {
		return idempotency.Order{}, ErrNotFound
	}
	var decided <-chan struct{}
	if wait > 0 {
		c, cancel := s.deps.Watcher.WatchOrder(orderID)
		defer cancel()
		decided = c
	}
	o, _, err := s.currentOrder(ctx, tenant, orderID)
	if err != nil || o.Status != idempotency.StatusPending || decided == nil {
		return o, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-decided:
	case <-timer.C:
		// The feed may lag behind the stream: read once more.
	case <-ctx.Done():
		return o, nil
	case <-s.draining:
		return o, nil
	}
	o, _, err = s.currentOrder(ctx, tenant, orderID)
	return o, err
}

// currentOrder reads the order and, once decided, its event as stored.
func (s *Service) currentOrder(ctx context.Context, tenant, orderID string) (idempotency.Order, []byte, error) {
	if err := s.available(); err != nil {
		return idempotency.Order{}, nil, err
	}
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	o, event, found, err := s.deps.Orders.Decided(ctx, orderID)
	if err != nil {
		return idempotency.Order{}, nil, unavailable("read order", err)
	}
	if found {
		if o.Tenant != tenant {
			return idempotency.Order{}, nil, ErrNotFound
		}
		return o, event, nil
	}
	cmd, found, err := s.deps.Commands.FindCommand(ctx, orderID)
	if err != nil {
		return idempotency.Order{}, nil, unavailable("read command", err)
	}
	if !found || cmd.Tenant != tenant {
		return idempotency.Order{}, nil, ErrNotFound
	}
	return idempotency.PendingOrder(cmd, orderID), nil, nil
}

// OrderEvents returns the JSON array of the order's events, oldest first, each
// as stored: its terminal event once decided (an order has at most one), none
// while pending.
func (s *Service) OrderEvents(ctx context.Context, tenant, orderID string) ([]byte, error) {
	if !events.ValidOrderID(orderID) {
		return nil, ErrNotFound
	}
	_, event, err := s.currentOrder(ctx, tenant, orderID)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	b.Write(event)
	b.WriteByte(']')
	return b.Bytes(), nil
}
