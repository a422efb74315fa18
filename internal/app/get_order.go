package app

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/projections"
)

// OrderView is an order as GET /v1/orders/{id} serves it.
type OrderView struct {
	Status projections.OrderStatus
	// Body is the JSON representation.
	Body []byte
}

// Order returns the order orderID of tenant: rendered from its event once
// decided, else from its command while pending. With wait > 0 and a pending order it waits up to
// wait for the decision (long polling) and returns the state it has then.
func (s *Service) Order(ctx context.Context, tenant, orderID string, wait time.Duration) (OrderView, error) {
	if !events.ValidOrderID(orderID) {
		return OrderView{}, ErrNotFound
	}
	var sub *projections.Sub[struct{}]
	if wait > 0 {
		sub = s.watch.WatchOrder(orderID)
		defer sub.Close()
	}
	v, err := s.currentOrder(ctx, tenant, orderID)
	if err != nil || v.Status != projections.StatusPending || sub == nil {
		return v, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-sub.C:
		return s.currentOrder(ctx, tenant, orderID)
	case <-timer.C:
		// The watch may lag behind the bucket: read once more.
		return s.currentOrder(ctx, tenant, orderID)
	case <-ctx.Done():
		return v, nil
	case <-s.draining:
		return v, nil
	}
}

func (s *Service) currentOrder(ctx context.Context, tenant, orderID string) (OrderView, error) {
	if err := s.available(); err != nil {
		return OrderView{}, err
	}
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	data, found, err := s.events.Event(ctx, orderID)
	if err != nil {
		return OrderView{}, unavailable("read order", err)
	}
	if found {
		p, err := projections.Project(data)
		if err != nil {
			return OrderView{}, fmt.Errorf("order %s: %w", orderID, err)
		}
		if p.Order.Tenant != tenant {
			return OrderView{}, ErrNotFound
		}
		return OrderView{Status: p.Order.Status, Body: p.Order.Body}, nil
	}
	cmd, found, err := s.commands.FindCommand(ctx, orderID)
	if err != nil {
		return OrderView{}, unavailable("read command", err)
	}
	if !found || cmd.Tenant != tenant {
		return OrderView{}, ErrNotFound
	}
	o := projections.PendingOrder(cmd, orderID)
	return OrderView{Status: o.Status, Body: o.Body}, nil
}

// OrderEvents returns the JSON array of the order's events, oldest first, each
// as stored. A pending order has none yet.
func (s *Service) OrderEvents(ctx context.Context, tenant, orderID string) ([]byte, error) {
	if _, err := s.currentOrder(ctx, tenant, orderID); err != nil {
		return nil, err
	}
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	evs, err := s.events.OrderEvents(ctx, orderID)
	if err != nil {
		return nil, unavailable("read events", err)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}
