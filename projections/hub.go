package projections

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
)

// Hub follows ORDER_RESULTS (a KV watch) and, while anyone long-polls,
// ORDER_EVENTS (an ordered consumer of headers only): one server consumer each
// per process whatever the number of waiters. It fans every update out to the
// requests waiting for that key or order. It also keeps the most recently completed results in memory, so
// that replays of fresh keys cost no round trip.
//
// A completed result never changes until it expires, so a cached one is as good
// as a stored one while Stored+TTL lies in the future.
type Hub struct {
	store   *Store
	logger  *slog.Logger
	results fanout[Result]
	orders  fanout[struct{}]
	cache   *lru.Cache[string, Result]

	ctx  context.Context
	stop func()
	done sync.WaitGroup

	evMu       sync.Mutex
	events     jetstream.ConsumeContext // nil while nobody long-polls
	idle       *time.Timer
	eventsIdle time.Duration
}

// HubConfig configures a Hub.
type HubConfig struct {
	// CacheSize is how many completed results are kept in memory; 0 disables
	// the cache.
	CacheSize int
	// EventsIdle is how long the consumer of ORDER_EVENTS outlives the last
	// order waiter (default 30s).
	EventsIdle time.Duration
}

// EventsFollowed reports whether the consumer of ORDER_EVENTS runs.
func (h *Hub) EventsFollowed() bool {
	h.evMu.Lock()
	defer h.evMu.Unlock()
	return h.events != nil
}

// NewHub returns a hub over store that caches up to cacheSize completed results
// (0 disables the cache).
func NewHub(store *Store, cfg HubConfig, logger *slog.Logger) (*Hub, error) {
	if cfg.EventsIdle <= 0 {
		cfg.EventsIdle = 30 * time.Second
	}
	h := &Hub{store: store, logger: logger.With("component", "hub"), eventsIdle: cfg.EventsIdle}
	if cfg.CacheSize > 0 {
		c, err := lru.New[string, Result](cfg.CacheSize)
		if err != nil {
			return nil, err
		}
		h.cache = c
	}
	return h, nil
}

// Start opens the watch of ORDER_RESULTS. Every update stored after Start
// returns reaches the waiters registered at that time. Stop ends it.
//
// The consumer of ORDER_EVENTS that wakes long polls starts with the first
// order waiter and stops after HubConfig.EventsIdle without one: a process
// nobody long-polls does not receive every event.
func (h *Hub) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rw, err := h.store.results.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		cancel()
		return fmt.Errorf("watch %s: %w", h.store.results.Bucket(), err)
	}
	h.ctx = ctx
	h.stop = func() {
		cancel()
		_ = rw.Stop()
		h.evMu.Lock()
		if h.events != nil {
			h.events.Stop()
			h.events = nil
		}
		if h.idle != nil {
			h.idle.Stop()
		}
		h.evMu.Unlock()
	}
	h.done.Add(1)
	go h.follow(rw, h.applyResult)
	return nil
}

// followEvents starts the consumer of ORDER_EVENTS if it is not running. It
// returns once the consumer exists, so every event stored afterwards is seen.
func (h *Hub) followEvents() error {
	h.evMu.Lock()
	defer h.evMu.Unlock()
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.events != nil || h.ctx == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	cons, err := h.store.js.OrderedConsumer(ctx, events.EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubjects}, DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true,
	})
	if err != nil {
		return fmt.Errorf("follow %s: %w", events.EventStream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		subj := m.Subject()
		h.orders.publish(subj[strings.LastIndexByte(subj, '.')+1:], struct{}{})
	})
	if err != nil {
		return fmt.Errorf("follow %s: %w", events.EventStream, err)
	}
	h.events = cc
	return nil
}

// releaseEvents stops the events consumer once no order waiter is left for
// the idle time.
func (h *Hub) releaseEvents() {
	if h.orders.count() > 0 {
		return
	}
	h.evMu.Lock()
	defer h.evMu.Unlock()
	if h.events == nil || h.idle != nil {
		return
	}
	h.idle = time.AfterFunc(h.eventsIdle, func() {
		h.evMu.Lock()
		defer h.evMu.Unlock()
		if h.orders.count() == 0 && h.events != nil {
			h.events.Stop()
			h.events = nil
		}
		h.idle = nil
	})
}

// applyResult caches a completed result and wakes the key's waiters.
func (h *Hub) applyResult(e jetstream.KeyValueEntry) {
	r, err := DecodeResult(e.Value())
	if err != nil {
		h.logger.Error("undecodable result", "key", e.Key(), "err", err)
		return
	}
	r.Stored = e.Created()
	if r.Completed() {
		h.Remember(e.Key(), r)
	} else if h.cache != nil {
		h.cache.Remove(e.Key())
	}
	h.results.publish(e.Key(), r)
}

func (h *Hub) follow(w jetstream.KeyWatcher, apply func(jetstream.KeyValueEntry)) {
	defer h.done.Done()
	for e := range w.Updates() {
		if e != nil {
			apply(e)
		}
	}
}

// Stop ends the watches and waits for their goroutines.
func (h *Hub) Stop() {
	if h.stop != nil {
		h.stop()
		h.done.Wait()
	}
}

// CachedResult returns the cached completed result of key, if it is still live.
func (h *Hub) CachedResult(key string) (Result, bool) {
	if h.cache == nil {
		return Result{}, false
	}
	r, ok := h.cache.Get(key)
	if !ok {
		return Result{}, false
	}
	if ttl := h.store.resultTTL; ttl > 0 && time.Since(r.Stored) >= ttl {
		h.cache.Remove(key)
		return Result{}, false
	}
	return r, true
}

// Remember caches a completed result read from the bucket.
func (h *Hub) Remember(key string, r Result) {
	if h.cache != nil && r.Completed() {
		h.cache.Add(key, r)
	}
}

// WatchResult registers a waiter for updates of key in ORDER_RESULTS. Close it
// when done.
func (h *Hub) WatchResult(key string) *Sub[Result] { return h.results.subscribe(key) }

// WatchOrder registers a waiter for the decision of orderID: C receives a
// value when the order's event is stored. Close it when done. When the events
// consumer cannot be started (NATS is away), the waiter is registered anyway and
// the caller's deadline ends the wait.
func (h *Hub) WatchOrder(orderID string) *Sub[struct{}] {
	sub := h.orders.subscribe(orderID)
	if err := h.followEvents(); err != nil {
		h.logger.Warn("long polls wait for their deadline", "err", err)
	}
	sub.onClose = h.releaseEvents
	return sub
}

// Waiters is the number of registered waiters, for metrics.
func (h *Hub) Waiters() int { return h.results.count() + h.orders.count() }

// Sub receives the updates of one key. C holds the latest update not yet read:
// a waiter that is slow misses intermediate values, never the last one.
type Sub[V any] struct {
	C       chan V
	key     string
	f       *fanout[V]
	onClose func()
}

// Close unregisters the waiter.
func (s *Sub[V]) Close() {
	s.f.unsubscribe(s)
	if s.onClose != nil {
		s.onClose()
	}
}

type fanout[V any] struct {
	mu   sync.Mutex
	subs map[string][]*Sub[V]
	n    int
}

func (f *fanout[V]) subscribe(key string) *Sub[V] {
	s := &Sub[V]{C: make(chan V, 1), key: key, f: f}
	f.mu.Lock()
	if f.subs == nil {
		f.subs = make(map[string][]*Sub[V])
	}
	f.subs[key] = append(f.subs[key], s)
	f.n++
	f.mu.Unlock()
	return s
}

func (f *fanout[V]) unsubscribe(s *Sub[V]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := f.subs[s.key]
	for i, x := range list {
		if x == s {
			list[i] = list[len(list)-1]
			list = list[:len(list)-1]
			f.n--
			break
		}
	}
	if len(list) == 0 {
		delete(f.subs, s.key)
	} else {
		f.subs[s.key] = list
	}
}

func (f *fanout[V]) publish(key string, v V) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs[key] {
		select { // keep only the latest value
		case <-s.C:
		default:
		}
		s.C <- v
	}
}

func (f *fanout[V]) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
