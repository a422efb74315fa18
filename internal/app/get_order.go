package app

import (
	"bytes"
	"context"
	"errors"
	"net/http"
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
	o, err := s.order(ctx, tenant, orderID, wait)
	return o, s.durable(ctx, err, ErrUnavailable)
}

func (s *Service) order(ctx context.Context, tenant, orderID string, wait time.Duration) (idempotency.Order, error) {
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
			next, _, err := s.currentOrder(ctx, tenant, orderID)
			if err == nil && next.Status != idempotency.StatusPending {
				return next, nil
			}
			if superseded := (*SupersededError)(nil); errors.As(err, &superseded) {
				return idempotency.Order{}, err // a keyed order's key went to another: no event will come
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
	return s.decidedWithoutEvent(ctx, cmd, orderID)
}

// eventLag bounds how long a read waits for the event of an order whose
// response is stored: the processor stores the response first, as the claim
// of the key, and the event just after it (ADR 0009).
const eventLag = 500 * time.Millisecond

// decidedWithoutEvent is the order of a command whose event is not stored:
// pending, unless its key already holds its decision. Then the event is at
// most a moment away (or a redelivery away, after a crash): the read waits
// for it up to eventLag, and a created order is rendered from its stored
// response (the same bytes as from its event) if the event is later still.
//
// A keyed order whose key holds another order's decision lost the key, or
// will lose it when its command is processed: it has no event and never will
// (ADR 0010), and the holder answers for it (SupersededError). (Until ADR
// 0010's step 3 ORDER_RESULTS alone says who holds a key: once the holder's
// response expires, such an order reads as pending until its command does.)
func (s *Service) decidedWithoutEvent(ctx context.Context, cmd events.CreateOrder, orderID string) (idempotency.Order, []byte, error) {
	pending := idempotency.PendingOrder(cmd, orderID)
	r, found, err := s.peek(ctx, cmd.KeyHash)
	if err != nil {
		return pending, nil, nil
	}
	if cmd.Keyed() && found && r.Completed() && r.OrderID != orderID {
		return idempotency.Order{}, nil, &SupersededError{OrderID: r.OrderID}
	}
	if !found || !r.Completed() || r.OrderID != orderID {
		return pending, nil, nil
	}
	for deadline := time.Now().Add(eventLag); time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return pending, nil, nil
		case <-time.After(5 * time.Millisecond):
		}
		o, event, found, err := s.deps.Orders.Decided(ctx, orderID)
		if err == nil && found {
			return o, event, nil
		}
	}
	if r.Status == http.StatusCreated {
		return idempotency.Order{Tenant: cmd.Tenant, Status: idempotency.StatusCreated, Body: r.Body}, nil, nil
	}
	return pending, nil, nil
}

// OrderEvents returns the JSON array of the order's events, oldest first, each
// as stored: its terminal event once decided (an order has at most one), none
// while pending.
func (s *Service) OrderEvents(ctx context.Context, tenant, orderID string) ([]byte, error) {
	if !events.ValidOrderID(orderID) {
		return nil, ErrNotFound
	}
	_, event, err := s.currentOrder(ctx, tenant, orderID)
	if err = s.durable(ctx, err, ErrUnavailable); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	b.Write(event)
	b.WriteByte(']')
	return b.Bytes(), nil
}
