package hub

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// fakeFeeds is an in-memory ResultFeed and DecisionFeed.
type fakeFeeds struct {
	mu        sync.Mutex
	results   func(string, idempotency.Record)
	decisions func(string)
	follows   int
	failStart error
	down      error
	// keys are the keys the bucket holds for Keys; keysErr fails Keys
	// keysFails times first.
	keys      map[string]time.Time
	keysErr   error
	keysFails int
	keysCalls int
}

func (f *fakeFeeds) Keys(_ context.Context, fn func(string, time.Time)) error {
	f.mu.Lock()
	f.keysCalls++
	if f.keysFails > 0 {
		f.keysFails--
		f.mu.Unlock()
		return f.keysErr
	}
	keys := maps.Clone(f.keys)
	f.mu.Unlock()
	for k, at := range keys {
		fn(k, at)
	}
	return nil
}

func (f *fakeFeeds) Watch(_ context.Context, fn func(string, idempotency.Record), _ func(string, error)) (func(), func() error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results = fn
	return func() {}, func() error { f.mu.Lock(); defer f.mu.Unlock(); return f.down }, nil
}

func (f *fakeFeeds) FollowDecisions(_ context.Context, fn func(string)) (func(), func() error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failStart != nil {
		return nil, nil, f.failStart
	}
	f.follows++
	f.decisions = fn
	return func() {
		f.mu.Lock()
		f.decisions = nil
		f.mu.Unlock()
	}, nil, nil
}

// following reports whether a decision feed runs.
func (f *fakeFeeds) following() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.decisions != nil
}

func (f *fakeFeeds) decide(orderID string) {
	f.mu.Lock()
	fn := f.decisions
	f.mu.Unlock()
	if fn != nil {
		fn(orderID)
	}
}

func newHub(t *testing.T, cfg Config, feeds *fakeFeeds) *Hub {
	t.Helper()
	h, err := New(cfg, feeds, feeds, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{CacheSize: -1}, &fakeFeeds{}, &fakeFeeds{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("negative cache size and no TTL accepted")
	}
	if _, err := New(Config{ResultTTL: time.Hour}, nil, &fakeFeeds{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("nil feed accepted")
	}
}

// TestWaitersGetResultsOfTheirKey: a waiter of a key gets the records stored
// for it, completed records are cached, pending ones drop the cache entry.
func TestWaitersGetResultsOfTheirKey(t *testing.T) {
	t.Parallel()
	feeds := &fakeFeeds{}
	h := newHub(t, Config{CacheSize: 10, ResultTTL: time.Hour}, feeds)
	c, cancel := h.WatchResult("k")
	other, cancelOther := h.WatchResult("other")
	if h.Waiters() != 2 {
		t.Fatalf("%d waiters", h.Waiters())
	}
	done := idempotency.Record{State: idempotency.StateCompleted, OrderID: "o", Status: 201, Stored: time.Now()}
	feeds.results("k", done)
	select {
	case r := <-c:
		if r.OrderID != "o" {
			t.Fatalf("got %+v", r)
		}
	case <-time.After(time.Second):
		t.Fatal("the waiter was not woken")
	}
	select {
	case r := <-other:
		t.Fatalf("a waiter of another key got %+v", r)
	default:
	}
	if r, ok := h.CachedResult("k"); !ok || r.OrderID != "o" {
		t.Fatal("completed record not cached")
	}
	feeds.results("k", idempotency.Pending("o2", "fp"))
	if _, ok := h.CachedResult("k"); ok {
		t.Fatal("a pending record left the old completed one in the cache")
	}
	cancel()
	cancelOther()
	if h.Waiters() != 0 {
		t.Fatalf("%d waiters after cancel", h.Waiters())
	}
}

func TestCacheHonoursTTL(t *testing.T) {
	t.Parallel()
	h := newHub(t, Config{CacheSize: 10, ResultTTL: time.Minute}, &fakeFeeds{})
	now := time.Now()
	h.now = func() time.Time { return now }
	h.Remember("fresh", idempotency.Record{State: idempotency.StateCompleted, Stored: now.Add(-59 * time.Second)})
	h.Remember("old", idempotency.Record{State: idempotency.StateCompleted, Stored: now.Add(-61 * time.Second)})
	h.Remember("pending", idempotency.Pending("o", "fp"))
	if _, ok := h.CachedResult("fresh"); !ok {
		t.Fatal("fresh result not served")
	}
	if _, ok := h.CachedResult("old"); ok {
		t.Fatal("expired result served")
	}
	if _, ok := h.CachedResult("pending"); ok {
		t.Fatal("pending record cached")
	}
}

// TestDecisionFeedRunsOnlyWhileWaited: the decision feed starts with the first
// order waiter, wakes it, and stops once no waiter is left for the idle time.
func TestDecisionFeedRunsOnlyWhileWaited(t *testing.T) {
	t.Parallel()
	feeds := &fakeFeeds{}
	h := newHub(t, Config{ResultTTL: time.Hour, EventsIdle: 50 * time.Millisecond}, feeds)
	if feeds.following() {
		t.Fatal("following decisions before anyone waits")
	}
	c, cancel := h.WatchOrder("ord_1")
	c2, cancel2 := h.WatchOrder("ord_1")
	if !feeds.following() || feeds.follows != 1 {
		t.Fatalf("following %v with %d feeds, want one feed for all waiters", feeds.following(), feeds.follows)
	}
	feeds.decide("ord_1")
	for _, ch := range []<-chan struct{}{c, c2} {
		select {
		case <-ch:
		case <-time.After(time.Second):
			t.Fatal("a waiter was not woken by the decision")
		}
	}
	cancel()
	time.Sleep(100 * time.Millisecond)
	if !feeds.following() {
		t.Fatal("the feed stopped while an order waiter is left")
	}
	cancel2()
	deadline := time.Now().Add(5 * time.Second)
	for feeds.following() {
		if time.Now().After(deadline) {
			t.Fatal("the decision feed did not stop when idle")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOrderWaitersSurviveAFeedFailure: without NATS the waiter still registers
// and the caller's deadline ends its wait.
func TestOrderWaitersSurviveAFeedFailure(t *testing.T) {
	t.Parallel()
	h := newHub(t, Config{ResultTTL: time.Hour}, &fakeFeeds{failStart: errors.New("no NATS")})
	c, cancel := h.WatchOrder("ord_1")
	defer cancel()
	if c == nil || h.Waiters() != 1 {
		t.Fatal("waiter not registered")
	}
}

func TestFanoutKeepsLatest(t *testing.T) {
	t.Parallel()
	var f fanout[int]
	s := f.subscribe("k")
	other := f.subscribe("other")
	f.publish("k", 1)
	f.publish("k", 2) // the waiter has not read 1: it gets 2
	if v := <-s.c; v != 2 {
		t.Fatalf("got %d, want the latest value 2", v)
	}
	select {
	case v := <-other.c:
		t.Fatalf("a waiter of another key got %d", v)
	default:
	}
	if f.count() != 2 {
		t.Fatalf("count %d", f.count())
	}
	s.close()
	other.close()
	if f.count() != 0 || len(f.subs) != 0 {
		t.Fatalf("after close: count %d, %d keys", f.count(), len(f.subs))
	}
}

func TestLiveFollowsTheResultFeed(t *testing.T) {
	t.Parallel()
	feeds := &fakeFeeds{}
	h := newHub(t, Config{ResultTTL: time.Hour}, feeds)
	if err := h.Live(); err != nil {
		t.Fatal(err)
	}
	feeds.mu.Lock()
	feeds.down = errors.New("no heartbeat")
	feeds.mu.Unlock()
	if err := h.Live(); err == nil {
		t.Fatal("live while the feed is down")
	}
}

// TestKnownNew: a key is known new only once the bucket's keys are loaded,
// while the feed is live, and when neither the bucket nor the feed had it.
func TestKnownNew(t *testing.T) {
	t.Parallel()
	feeds := &fakeFeeds{keys: map[string]time.Time{"stored": time.Now().Add(-time.Hour)}, keysFails: 2, keysErr: errors.New("no responders")}
	h, err := New(Config{ResultTTL: 24 * time.Hour}, feeds, feeds, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if h.KnownNew("fresh") {
		t.Fatal("known new before the hub started")
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	eventually(t, func() bool { return h.KnownNew("fresh") })
	feeds.mu.Lock()
	calls := feeds.keysCalls
	feeds.mu.Unlock()
	if calls != 3 {
		t.Fatalf("keys loaded after %d calls, want 3 (two failed)", calls)
	}
	if h.KnownNew("stored") {
		t.Fatal("a key the bucket holds is called new")
	}
	feeds.results("fresh", idempotency.Pending("ord_1", "fp"))
	if h.KnownNew("fresh") {
		t.Fatal("a key the feed delivered is called new")
	}
	feeds.mu.Lock()
	feeds.down = errors.New("missed heartbeats")
	feeds.mu.Unlock()
	if h.KnownNew("other") {
		t.Fatal("a key is called new while the feed is down")
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeKeys is an in-memory KeyFeed.
type fakeKeys struct {
	mu     sync.Mutex
	follow func(token string, data []byte)
	tokens map[string]time.Time
	since  time.Time
	down   error
}

func (f *fakeKeys) FollowKeys(_ context.Context, fn func(string, []byte)) (func(), func() error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.follow = fn
	return func() {}, func() error { f.mu.Lock(); defer f.mu.Unlock(); return f.down }, nil
}

func (f *fakeKeys) KeyTokens(_ context.Context, since time.Time, fn func(string, time.Time)) error {
	f.mu.Lock()
	f.since = since
	tokens := maps.Clone(f.tokens)
	f.mu.Unlock()
	for k, at := range tokens {
		fn(k, at)
	}
	return nil
}

// TestKeyedEventsAnswerKeys: keyed events (ADR 0010) answer their keys as
// the bucket's records do: one wakes the requests waiting for its key with
// the response the event makes (rendered only when someone waits, then
// cached), and its key is no longer new; the keys of the keyed events within
// the result TTL are loaded at start; the keyed feed down means no key is
// known new.
func TestKeyedEventsAnswerKeys(t *testing.T) {
	t.Parallel()
	key, stored := idempotency.KeyHash("t", "k"), idempotency.KeyHash("t", "stored")
	keys := &fakeKeys{tokens: map[string]time.Time{tokenOf(stored): time.Now().Add(-time.Minute)}}
	h := newHub(t, Config{ResultTTL: time.Hour, CacheSize: 8, Keys: keys}, &fakeFeeds{})
	eventually(t, func() bool { return h.KnownNew(key) })
	keys.mu.Lock()
	since := keys.since
	keys.mu.Unlock()
	if d := time.Since(since); d < time.Hour || d > time.Hour+time.Minute {
		t.Fatalf("keyed keys loaded since %s ago, want the result TTL", d)
	}
	if h.KnownNew(stored) {
		t.Fatal("the key of a loaded keyed event is called new")
	}
	c, cancel := h.WatchResult(key)
	defer cancel()
	total := int64(10)
	at := time.Now().Add(-time.Second).UTC()
	cmd := events.CreateOrder{Type: events.CreateOrderType, IDForm: events.IDFormKeyed, Tenant: "t", KeyHash: key, Fingerprint: "fp", AcceptedAt: at,
		Request: events.OrderRequest{CustomerID: "c", Currency: "EUR", Items: []events.Item{{SKU: "a", Quantity: 2, UnitPrice: 5}}, Total: &total}}
	token, _ := events.KeyToken(key)
	id := events.KeyedOrderID(7, token)
	ev := events.NewEvent(events.OrderCreatedType, events.KindCreated, id, at, events.OrderCreated{OrderID: id, Tenant: "t", CustomerID: "c",
		Currency: "EUR", Items: cmd.Request.Items, Total: 10, IdempotencyKeyHash: key, RequestFingerprint: "fp", AcceptedAt: at, CreatedAt: at})
	data, _ := json.Marshal(ev)
	keys.follow(token, data)
	select {
	case r := <-c:
		if !r.Completed() || r.OrderID != id || r.Status != 201 || !r.Stored.Equal(at) {
			t.Fatalf("answer %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the keyed event")
	}
	if r, ok := h.CachedResult(key); !ok || r.OrderID != id {
		t.Fatalf("cached: %+v %v", r, ok)
	}
	if h.KnownNew(key) {
		t.Fatal("the key of a followed keyed event is called new")
	}
	keys.mu.Lock()
	keys.down = errors.New("missed heartbeats")
	keys.mu.Unlock()
	if h.Live() == nil || h.KnownNew(idempotency.KeyHash("t", "other")) {
		t.Fatal("live, or a key called new, while the keyed feed is down")
	}
}
