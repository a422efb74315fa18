package jsstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// WriteHealth follows the outcome of the writes that go through the
// Publishers it wraps: it reports a problem while the last write failed
// because NATS was unavailable (the store refused it, or nobody answered) and
// none has succeeded since. A failure older than Forget with no write after it
// is forgotten: an idle process has nothing to report.
type WriteHealth struct {
	// Forget is how long an unanswered failure counts (default 10s).
	Forget time.Duration

	mu       sync.Mutex
	lastOK   time.Time
	lastFail time.Time
	lastErr  error
}

// Publisher returns pub with its writes followed.
func (h *WriteHealth) Publisher(pub Publisher) Publisher { return followed{h: h, pub: pub} }

type followed struct {
	h   *WriteHealth
	pub Publisher
}

func (f followed) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := f.pub.PublishMsg(ctx, msg, opts...)
	f.h.record(err)
	return ack, err
}

func (h *WriteHealth) record(err error) {
	if err != nil && (!IsUnavailable(err) || errors.Is(err, ErrStorageLow)) {
		return // an answer (a duplicate, a wrong sequence) or the guard's refusal: not a fault of the store
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.lastOK = now
		return
	}
	h.lastFail, h.lastErr = now, err
}

// Follow makes each reconnect of nc clear a failure recorded before it:
// the failure was the old connection's, which may have been to a server that
// hung or lost its cluster, and without a write after the reconnect it would
// keep the process not ready for Forget. If NATS still fails, the next write
// says so again. Follow ends when nc is closed.
func (h *WriteHealth) Follow(nc *nats.Conn) {
	ch := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	go func() {
		for st := range ch {
			if st == nats.CLOSED {
				nc.RemoveStatusListener(ch)
				return
			}
			h.reconnected(time.Now())
		}
	}()
}

// reconnected clears a failure recorded before at.
func (h *WriteHealth) reconnected(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastFail.Before(at) {
		h.lastOK = at
	}
}

// Check is nil unless the last write failed for want of NATS, recently.
func (h *WriteHealth) Check(context.Context) error {
	forget := h.Forget
	if forget == 0 {
		forget = 10 * time.Second
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastFail.After(h.lastOK) && time.Since(h.lastFail) < forget {
		return fmt.Errorf("writes failing since %s: %w", h.lastFail.UTC().Format(time.RFC3339), h.lastErr)
	}
	return nil
}
