// Package hub is an API process's view of decisions: it follows the stored
// results (one watch of ORDER_RESULTS, and one consumer of the keyed events of
// ORDER_EVENTS, each the answer of its key: ADR 0010) and, while anyone
// long-polls, the decisions (one headers-only consumer of ORDER_EVENTS), and
// fans every update out to the requests waiting for that key or order: one
// server consumer each per process, whatever the number of waiters. It also
// keeps the most recently completed results in memory, so that replays of
// fresh keys cost no round trip.
//
// It talks to NATS only through ResultFeed and DecisionFeed (internal/jsstore
// implements both) and must not import NATS, the HTTP layer or the use cases.
package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/projections"
)

// ResultFeed delivers every record stored after Watch returns, in order, from
// one goroutine, until stop; bad receives records it cannot decode; live is
// nil while the feed delivers (it recovers by itself after an interruption).
// Keys calls f with every key that has a record when it is called, and the
// time that record was written, then returns.
type ResultFeed interface {
	Watch(ctx context.Context, f func(key string, rec idempotency.Record), bad func(key string, err error)) (stop func(), live func() error, err error)
	Keys(ctx context.Context, f func(key string, at time.Time)) error
}

// KeyFeed follows the keyed events of ADR 0010, each its key's answer:
// FollowKeys calls f with the key token and the data of every keyed event
// stored after it returns, from one goroutine, until stop (live as for
// ResultFeed); KeyTokens calls f with the token of every keyed event stored
// since since, and when it was stored, then returns.
type KeyFeed interface {
	FollowKeys(ctx context.Context, f func(token string, data []byte)) (stop func(), live func() error, err error)
	KeyTokens(ctx context.Context, since time.Time, f func(token string, at time.Time)) error
}

// DecisionFeed calls f with the order ID of every decision stored after
// FollowDecisions returns, until stop.
type DecisionFeed interface {
	FollowDecisions(ctx context.Context, f func(orderID string)) (stop func(), live func() error, err error)
}

// Config configures a Hub. Zero fields take defaults.
type Config struct {
	// CacheSize is how many completed results are kept in memory; 0 disables
	// the cache (default 0).
	CacheSize int
	// ResultTTL is how long a result answers retries; a cached result older
	// than that is not served. Required.
	ResultTTL time.Duration
	// EventsIdle is how long the decision feed outlives the last order waiter
	// (default 30s).
	EventsIdle time.Duration
	// FollowTimeout bounds starting the decision feed (default 5s).
	FollowTimeout time.Duration
	// KeyFilterBytes bounds the memory of the filters that tell new keys
	// (about 2 bytes per key written within the result TTL; default 64 MiB).
	// Past it, every key is read before it is published.
	KeyFilterBytes uint
	// Keys, when set, is followed beside the results: the keyed events of
	// ADR 0010 answer their keys as the bucket's records do.
	Keys KeyFeed
}

func (c *Config) setDefaults() {
	if c.EventsIdle == 0 {
		c.EventsIdle = 30 * time.Second
	}
	if c.FollowTimeout == 0 {
		c.FollowTimeout = 5 * time.Second
	}
	if c.KeyFilterBytes == 0 {
		c.KeyFilterBytes = 64 << 20
	}
}

// Validate reports every problem with c; zero fields count as their defaults.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("hub: cache size must not be negative, got %d", c.CacheSize))
	}
	if c.ResultTTL <= 0 {
		errs = append(errs, fmt.Errorf("hub: result TTL must be positive, got %s", c.ResultTTL))
	}
	if c.EventsIdle < 0 || c.FollowTimeout < 0 {
		errs = append(errs, errors.New("hub: durations must not be negative"))
	}
	return errors.Join(errs...)
}

// Hub is the view. Start it, Stop it.
type Hub struct {
	cfg       Config
	results   ResultFeed
	decisions DecisionFeed
	logger    *slog.Logger
	waitingR  fanout[idempotency.Record]
	waitingO  fanout[struct{}]
	cache     *lru.Cache[string, idempotency.Record]
	now       func() time.Time

	// seen holds the keys with a record: those of the bucket when the feed
	// started (loaded once, keysLoaded) and those the feed delivered since.
	seen       *seenKeys
	keysLoaded atomic.Bool

	ctx      context.Context
	stopAll  func()
	live     func() error
	liveKeys func() error // nil without Config.Keys
	evMu     sync.Mutex
	stopDecs func() // nil while nobody long-polls
	idle     *time.Timer
}

// New returns a hub over the feeds. reg receives the orderly_waiters gauge.
func New(cfg Config, results ResultFeed, decisions DecisionFeed, reg prometheus.Registerer, logger *slog.Logger) (*Hub, error) {
	cfg.setDefaults()
	errs := []error{cfg.Validate()}
	if results == nil || decisions == nil || reg == nil || logger == nil {
		errs = append(errs, errors.New("hub: nil dependency"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h := &Hub{cfg: cfg, results: results, decisions: decisions, logger: logger.With("component", "hub"), now: time.Now,
		seen: newSeenKeys(cfg.ResultTTL, cfg.KeyFilterBytes)}
	if cfg.CacheSize > 0 {
		c, err := lru.New[string, idempotency.Record](cfg.CacheSize)
		if err != nil {
			return nil, err
		}
		h.cache = c
	}
	err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "orderly_waiters",
		Help: "Requests waiting for a decision (POST) or a change (GET ?wait=).",
	}, func() float64 { return float64(h.Waiters()) }))
	if err != nil {
		return nil, err
	}
	err = reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "orderly_key_filter_bytes",
		Help: "Memory of the filters that tell new idempotency keys, which are published without a read.",
	}, func() float64 { _, b := h.seen.filters(); return float64(b) }))
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Start opens the watch of the results. Every record stored after Start
// returns reaches the waiters registered at that time.
//
// The decision feed that wakes long polls starts with the first order waiter
// and stops after Config.EventsIdle without one: a process nobody long-polls
// does not receive every event.
func (h *Hub) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop, live, err := h.results.Watch(ctx, h.applyResult, h.undecodable)
	if err != nil {
		cancel()
		return err
	}
	stopKeys := func() {}
	if h.cfg.Keys != nil {
		stopKeys, h.liveKeys, err = h.cfg.Keys.FollowKeys(ctx, h.applyKeyed)
		if err != nil {
			stop()
			cancel()
			return err
		}
	}
	h.ctx, h.live = ctx, live
	go h.loadKeys(ctx)
	h.stopAll = func() {
		cancel()
		stop()
		stopKeys()
		h.evMu.Lock()
		if h.stopDecs != nil {
			h.stopDecs()
			h.stopDecs = nil
		}
		if h.idle != nil {
			h.idle.Stop()
		}
		h.evMu.Unlock()
	}
	return nil
}

// Stop ends the feeds.
func (h *Hub) Stop() {
	if h.stopAll != nil {
		h.stopAll()
	}
}

// followDecisions starts the decision feed if it is not running. It returns
// once the feed runs, so every decision stored afterwards is seen.
func (h *Hub) followDecisions() error {
	h.evMu.Lock()
	defer h.evMu.Unlock()
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.stopDecs != nil || h.ctx == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.FollowTimeout)
	defer cancel()
	stop, _, err := h.decisions.FollowDecisions(ctx, func(orderID string) { h.waitingO.publish(orderID, struct{}{}) })
	if err != nil {
		return err
	}
	h.stopDecs = stop
	return nil
}

// releaseDecisions stops the decision feed once no order waiter is left for
// the idle time.
func (h *Hub) releaseDecisions() {
	if h.waitingO.count() > 0 {
		return
	}
	h.evMu.Lock()
	defer h.evMu.Unlock()
	if h.stopDecs == nil || h.idle != nil {
		return
	}
	h.idle = time.AfterFunc(h.cfg.EventsIdle, func() {
		h.evMu.Lock()
		defer h.evMu.Unlock()
		if h.waitingO.count() == 0 && h.stopDecs != nil {
			h.stopDecs()
			h.stopDecs = nil
		}
		h.idle = nil
	})
}

// loadKeys reads the keys that had a record when the feed started, trying
// again until it succeeds or the hub stops; the feed adds every later one.
func (h *Hub) loadKeys(ctx context.Context) {
	wait := 100 * time.Millisecond
	for {
		start, n := time.Now(), 0
		add := func(key string, at time.Time) {
			h.seen.Add(tokenOf(key), at)
			n++
		}
		err := h.results.Keys(ctx, add)
		if err == nil && h.cfg.Keys != nil {
			err = h.cfg.Keys.KeyTokens(ctx, start.Add(-h.cfg.ResultTTL), add)
		}
		if err == nil {
			h.keysLoaded.Store(true)
			h.logger.Info("idempotency keys loaded: new keys are published without a read", "keys", n, "took", time.Since(start).Round(time.Millisecond))
			return
		}
		if ctx.Err() != nil {
			return
		}
		h.logger.Warn("loading the idempotency keys; every key is read before it is published meanwhile", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// KnownNew reports whether key certainly had no record when the feed last
// delivered: the keys of the bucket are loaded, the feed is live, and key is
// not among them (Bloom filters: under 2% of new keys are not recognised as
// new, and are read). The feed lags the bucket by the time a delivery takes, so a record
// stored just now may be missing: a caller that publishes on this answer
// relies on the broker's duplicate window and the processor's claim for
// such a key, as for a record stored just after a read.
func (h *Hub) KnownNew(key string) bool {
	if !h.keysLoaded.Load() || h.Live() != nil {
		return false
	}
	return !h.seen.MayHave(tokenOf(key))
}

// tokenOf is the token of a hashed key (events.KeyToken): the filters and
// the waiters know keys by it, as keyed events name them.
func tokenOf(key string) string {
	if len(key) > events.KeyTokenLen {
		return key[:events.KeyTokenLen]
	}
	return key
}

// applyResult caches a completed record and wakes the key's waiters.
func (h *Hub) applyResult(key string, r idempotency.Record) {
	h.seen.Add(tokenOf(key), h.now())
	if r.Completed() {
		h.Remember(key, r)
	} else if h.cache != nil {
		h.cache.Remove(key)
	}
	h.waitingR.publish(tokenOf(key), r)
}

// undecodable takes a record that cannot be decoded (damaged, or not
// orderly's): the key has a record, so its requests read the store, which
// refuses it, rather than take the key for new.
func (h *Hub) undecodable(key string, err error) {
	h.logger.Error("undecodable result", "key", key, "err", err)
	h.seen.Add(tokenOf(key), h.now())
	if h.cache != nil {
		h.cache.Remove(key)
	}
}

// applyKeyed takes a keyed event: its key has an answer now. The answer is
// rendered (projections.Project, the bytes of the processor's decision) only
// when a request waits for the key, and then cached: an order nobody waits
// for costs the feed no more than its token.
func (h *Hub) applyKeyed(token string, data []byte) {
	h.seen.Add(token, h.now())
	if !h.waitingR.has(token) {
		return
	}
	p, err := projections.Project(data)
	if err != nil {
		h.logger.Error("undecodable keyed event", "key_token", token, "err", err)
		return
	}
	if p.Record == nil || tokenOf(p.Key) != token {
		return // not an answer of this key (keyed orders store no other event)
	}
	r := *p.Record
	r.Stored = p.At // its time counts from the decision (see Record.Expired)
	h.Remember(p.Key, r)
	h.waitingR.publish(token, r)
}

// CachedResult returns the cached completed record of key, if it is still live.
// A completed record never changes until it expires, so a cached one is as
// good as a stored one until then.
func (h *Hub) CachedResult(key string) (idempotency.Record, bool) {
	if h.cache == nil {
		return idempotency.Record{}, false
	}
	r, ok := h.cache.Get(key)
	if !ok {
		return idempotency.Record{}, false
	}
	if r.Expired(h.cfg.ResultTTL, h.now()) {
		h.cache.Remove(key)
		return idempotency.Record{}, false
	}
	return r, true
}

// Remember caches a completed record read from the store, or delivered
// by it: a record without Seen is stamped with the time it is cached (it
// was in the store by then).
func (h *Hub) Remember(key string, r idempotency.Record) {
	if h.cache != nil && r.Completed() {
		if r.Seen.IsZero() {
			r.Seen = time.Now()
		}
		h.cache.Add(key, r)
	}
}

// WatchResult registers a waiter for the records of key stored from now on.
// C holds the latest record not yet read; cancel unregisters.
func (h *Hub) WatchResult(key string) (c <-chan idempotency.Record, cancel func()) {
	s := h.waitingR.subscribe(tokenOf(key))
	return s.c, s.close
}

// WatchOrder registers a waiter for the decision of orderID: C receives a
// value when the order's event is stored; cancel unregisters. When the
// decision feed cannot be started (NATS is away) the waiter is registered
// anyway and the caller's deadline ends the wait.
func (h *Hub) WatchOrder(orderID string) (c <-chan struct{}, cancel func()) {
	s := h.waitingO.subscribe(orderID)
	if err := h.followDecisions(); err != nil {
		h.logger.Warn("long polls wait for their deadline", "err", err)
	}
	return s.c, func() { s.close(); h.releaseDecisions() }
}

// Live is nil while the result feed delivers; while it does not, waiters
// must read the store themselves (internal/app does).
func (h *Hub) Live() error {
	if h.live == nil {
		return errors.New("hub not started")
	}
	if err := h.live(); err != nil {
		return fmt.Errorf("result feed: %w", err)
	}
	if h.liveKeys != nil {
		if err := h.liveKeys(); err != nil {
			return fmt.Errorf("keyed event feed: %w", err)
		}
	}
	return nil
}

// Waiters is the number of registered waiters.
func (h *Hub) Waiters() int { return h.waitingR.count() + h.waitingO.count() }

// sub receives the updates of one key. c holds the latest update not yet
// read: a waiter that is slow misses intermediate values, never the last one.
type sub[V any] struct {
	c   chan V
	key string
	f   *fanout[V]
}

func (s *sub[V]) close() { s.f.unsubscribe(s) }

type fanout[V any] struct {
	mu   sync.Mutex
	subs map[string][]*sub[V]
	n    int
}

func (f *fanout[V]) subscribe(key string) *sub[V] {
	s := &sub[V]{c: make(chan V, 1), key: key, f: f}
	f.mu.Lock()
	if f.subs == nil {
		f.subs = make(map[string][]*sub[V])
	}
	f.subs[key] = append(f.subs[key], s)
	f.n++
	f.mu.Unlock()
	return s
}

func (f *fanout[V]) unsubscribe(s *sub[V]) {
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
		case <-s.c:
		default:
		}
		s.c <- v
	}
}

func (f *fanout[V]) has(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs[key]) > 0
}

func (f *fanout[V]) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
