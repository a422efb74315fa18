package jsstore

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
)

// Health follows a connection's state so that requests fail at once when NATS
// goes away, instead of waiting out their timeouts while the client reconnects.
type Health struct {
	nc     *nats.Conn
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

// WatchHealth follows nc until it is closed.
func WatchHealth(nc *nats.Conn) *Health {
	h := &Health{nc: nc}
	h.update()
	ch := nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	go func() {
		for st := range ch {
			h.update()
			if st == nats.CLOSED {
				nc.RemoveStatusListener(ch)
			}
		}
	}()
	return h
}

func (h *Health) update() {
	h.mu.Lock()
	defer h.mu.Unlock()
	up := h.nc.IsConnected()
	switch {
	case up && (h.ctx == nil || h.ctx.Err() != nil):
		h.ctx, h.cancel = context.WithCancel(context.Background())
	case !up && h.ctx == nil:
		h.ctx, h.cancel = context.WithCancel(context.Background())
		h.cancel()
	case !up:
		h.cancel()
	}
}

// Up is canceled when the connection is lost; while it is down, Up returns a
// canceled context, and after a reconnect a fresh one.
func (h *Health) Up() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ctx
}
