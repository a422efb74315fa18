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
	poll := time.NewTimer(s.pollInterval())
	defer poll.Stop()
	for {
		select {
		case <-decided:
		case <-poll.C:
			// A safety net, often while the feed is down.
			if next, _, err := s.currentOrder(ctx, tenant, orderID); err == nil && next.Status != idempotency.StatusPending {
				return next, nil
			}
			poll.Reset(s.pollInterval())
			continue
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
}

// currentOrder reads the order and, once decided, its event as stored.
func (s *Service) currentOrder(ctx context.Context, tenant, orderID string) (o idempotency.Order, event []byte, err error) {
	var found bool
	err = s.call(ctx, "read order", func(ctx context.Context) (err error) {
		o, event, found, err = s.deps.Orders.Decided(ctx, orderID)
		return err
	})
	if err != nil {
		return idempotency.Order{}, nil, err
	}
	if found {
		if o.Tenant != tenant {
			return idempotency.Order{}, nil, ErrNotFound
		}
		return o, event, nil
	}
	var cmd events.CreateOrder
	err = s.call(ctx, "read command", func(ctx context.Context) (err error) {
		cmd, found, err = s.deps.Commands.FindCommand(ctx, orderID)
		return err
	})
	if err != nil {
		return idempotency.Order{}, nil, err
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
