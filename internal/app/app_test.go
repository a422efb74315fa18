package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// Fakes of the service's ports: plain maps, no NATS.

type fakeResults struct {
	mu    sync.Mutex
	m     map[string]idempotency.Record
	err   error
	reads int
	// hanging, when set, makes the first read hang until its context ends,
	// and is closed when it does.
	hanging chan struct{}
}

func (f *fakeResults) Get(ctx context.Context, key string) (idempotency.Record, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.hanging != nil && f.reads == 1 {
		f.mu.Unlock()
		close(f.hanging)
		<-ctx.Done()
		f.mu.Lock()
		return idempotency.Record{}, false, ctx.Err()
	}
	if f.err != nil {
		return idempotency.Record{}, false, f.err
	}
	r, ok := f.m[key]
	return r, ok, nil
}

type fakeCache struct {
	mu sync.Mutex
	m  map[string]idempotency.Record
	// knownNew is what KnownNew says of every key.
	knownNew bool
}

func (f *fakeCache) KnownNew(string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.knownNew
}

func (f *fakeCache) CachedResult(key string) (idempotency.Record, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.m[key]
	return r, ok
}

func (f *fakeCache) Remember(key string, r idempotency.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]idempotency.Record{}
	}
	if r.Completed() {
		f.m[key] = r
	}
}

// fakeWatcher hands out channels the test can send to.
type fakeWatcher struct {
	mu      sync.Mutex
	results map[string]chan idempotency.Record
	orders  map[string]chan struct{}
	down    error
}

func (f *fakeWatcher) Live() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

func (f *fakeWatcher) WatchResult(key string) (<-chan idempotency.Record, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.results == nil {
		f.results = map[string]chan idempotency.Record{}
	}
	c := make(chan idempotency.Record, 1)
	f.results[key] = c
	return c, func() {}
}

func (f *fakeWatcher) WatchOrder(id string) (<-chan struct{}, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.orders == nil {
		f.orders = map[string]chan struct{}{}
	}
	c := make(chan struct{}, 1)
	f.orders[id] = c
	return c, func() {}
}

func (f *fakeWatcher) send(key string, r idempotency.Record) {
	for {
		f.mu.Lock()
		c := f.results[key]
		f.mu.Unlock()
		if c != nil {
			c <- r
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// storeErr is an adapter's error: Temporary and NotStored as the port says.
type storeErr struct{ temporary, notStored bool }

func (e storeErr) Error() string {
	return fmt.Sprintf("store error (temporary %v, not stored %v)", e.temporary, e.notStored)
}
func (e storeErr) Temporary() bool { return e.temporary }
func (e storeErr) NotStored() bool { return e.notStored }

var (
	timedOut  = storeErr{temporary: true}                  // may have been stored
	noLeader  = storeErr{temporary: true, notStored: true} // the server said no
	malformed = storeErr{notStored: true}                  // a permanent refusal
)

type fakeCommands struct {
	mu        sync.Mutex
	byKey     map[string]uint64 // the broker's window
	stored    map[uint64]events.CreateOrder
	published int
	err       error
	failFirst int   // the first attempts fail with failWith...
	failWith  error // ...after storing the command when it is timedOut
	// hangFirst makes the first attempt store the command and then hang
	// until its context ends (an ack that never comes), returning its error.
	hangFirst bool
	hanging   chan struct{} // closed once the first attempt hangs
}

func (f *fakeCommands) Publish(ctx context.Context, cmd events.CreateOrder) (uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published++
	if f.hangFirst && f.published == 1 {
		f.store(cmd)
		f.mu.Unlock()
		close(f.hanging)
		<-ctx.Done()
		f.mu.Lock()
		return 0, false, ctx.Err()
	}
	if f.err != nil {
		return 0, false, f.err
	}
	if f.published <= f.failFirst {
		if f.failWith == error(timedOut) { // stored, but the ack was lost
			f.store(cmd)
		}
		return 0, false, f.failWith
	}
	if seq, ok := f.byKey[cmd.KeyHash]; ok {
		return seq, true, nil
	}
	return f.store(cmd), false, nil
}

func (f *fakeCommands) store(cmd events.CreateOrder) uint64 {
	if seq, ok := f.byKey[cmd.KeyHash]; ok {
		return seq
	}
	if f.byKey == nil {
		f.byKey, f.stored = map[string]uint64{}, map[uint64]events.CreateOrder{}
	}
	seq := uint64(len(f.stored) + 1)
	f.byKey[cmd.KeyHash], f.stored[seq] = seq, cmd
	return seq
}

func (f *fakeCommands) Command(_ context.Context, seq uint64) (events.CreateOrder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.stored[seq]
	if !ok {
		return c, errors.New("not found")
	}
	return c, nil
}

func (f *fakeCommands) FindCommand(_ context.Context, orderID string) (events.CreateOrder, bool, error) {
	seq, ok := events.OrderSeq(orderID)
	if !ok {
		return events.CreateOrder{}, false, nil
	}
	c, err := f.Command(context.Background(), seq)
	return c, err == nil && c.HasOrderID(orderID), nil
}

type fakeOrders struct {
	mu    sync.Mutex
	m     map[string]idempotency.Order
	reads int
}

func (f *fakeOrders) Decided(_ context.Context, id string) (idempotency.Order, []byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	o, ok := f.m[id]
	return o, []byte(`{"event":"` + id + `"}`), ok, nil
}

type fixture struct {
	svc      *Service
	results  *fakeResults
	cache    *fakeCache
	watcher  *fakeWatcher
	commands *fakeCommands
	orders   *fakeOrders
	upMu     sync.Mutex
	up       context.Context
	down     context.CancelFunc
}

// reconnect makes the connection up again after down.
func (f *fixture) reconnect() {
	f.upMu.Lock()
	defer f.upMu.Unlock()
	f.up, f.down = context.WithCancel(context.Background())
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{results: &fakeResults{m: map[string]idempotency.Record{}}, cache: &fakeCache{}, watcher: &fakeWatcher{},
		commands: &fakeCommands{}, orders: &fakeOrders{m: map[string]idempotency.Order{}}}
	f.up, f.down = context.WithCancel(context.Background())
	svc, err := NewService(Config{RequestTimeout: time.Second, Up: func() context.Context {
		f.upMu.Lock()
		defer f.upMu.Unlock()
		return f.up
	},
		ReconnectGrace: 50 * time.Millisecond, PollInterval: time.Second, DownPollInterval: 20 * time.Millisecond},
		Deps{Results: f.results, Cache: f.cache, Watcher: f.watcher, Commands: f.commands, Orders: f.orders}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	svc.newNonce = func() string { return "N0NCE0000000A" }
	f.svc = svc
	return f
}

var key = idempotency.KeyHash("t", "k")

func submit(wait, waitPending time.Duration) SubmitOrder {
	return SubmitOrder{Tenant: "t", KeyHash: key, Fingerprint: "fp", Wait: wait, WaitForPending: waitPending,
		Request: events.OrderRequest{CustomerID: "c", Currency: "EUR", Items: []events.Item{{SKU: "a", Quantity: 1, UnitPrice: 1}}}}
}

func completed(orderID, fp string) idempotency.Record {
	return idempotency.Record{State: idempotency.StateCompleted, OrderID: orderID, Fingerprint: fp, Status: 201, Body: []byte("{}")}
}

var firstID = events.OrderID(1, "N0NCE0000000A")

func TestSubmit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		setup     func(f *fixture)
		in        SubmitOrder
		decide    *idempotency.Record // sent on the key's watch after the publish
		kind      OutcomeKind
		orderID   string
		replayed  bool
		err       error
		published int
		reads     *int // reads of the key's record before the answer, when checked
	}{
		{name: "new key, respond at once", in: submit(0, 0), kind: Accepted, orderID: firstID, published: 1, reads: ptr(1)},
		{name: "key known to be new: published without a read", setup: func(f *fixture) { f.cache.knownNew = true },
			in: submit(0, 0), kind: Accepted, orderID: firstID, published: 1, reads: ptr(0)},
		{name: "key called new by a view that lagged, holding a result: our command loses the claim, the holder's answer is replayed",
			setup: func(f *fixture) { f.cache.knownNew = true; f.results.m[key] = completed("ord_x", "fp") },
			in:    submit(200*time.Millisecond, 0), kind: Completed, orderID: "ord_x", replayed: true, published: 1},
		{name: "key called new by a view that lagged, holding another request's result: key reused",
			setup: func(f *fixture) { f.cache.knownNew = true; f.results.m[key] = completed("ord_x", "other") },
			in:    submit(200*time.Millisecond, 0), err: &KeyReusedError{}, published: 1},
		{name: "new key, decided within the wait", in: submit(time.Second, 0), decide: ptr(completed(firstID, "fp")),
			kind: Completed, orderID: firstID, published: 1},
		{name: "new key, not decided within the wait", in: submit(20*time.Millisecond, 0), kind: Accepted, orderID: firstID, published: 1},
		{name: "new key, only a pending claim within the wait (an earlier version's): accepted", in: submit(50*time.Millisecond, 0),
			decide: ptr(idempotency.Pending(firstID, "fp")), kind: Accepted, orderID: firstID, published: 1},
		{name: "our command lost the claim to an earlier order: its answer, a replay", in: submit(time.Second, 0),
			decide: ptr(completed("ord_other", "fp")), kind: Completed, orderID: "ord_other", replayed: true, published: 1},
		{name: "cached result: replayed without a read or a publish", setup: func(f *fixture) { f.cache.Remember(key, completed("ord_x", "fp")) },
			in: submit(0, 0), kind: Completed, orderID: "ord_x", replayed: true},
		{name: "stored result: replayed", setup: func(f *fixture) { f.results.m[key] = completed("ord_x", "fp") },
			in: submit(0, 0), kind: Completed, orderID: "ord_x", replayed: true},
		{name: "stored result of another request: key reused", setup: func(f *fixture) { f.results.m[key] = completed("ord_x", "other") },
			in: submit(0, 0), err: &KeyReusedError{}},
		{name: "pending: in progress", setup: func(f *fixture) { f.results.m[key] = idempotency.Pending("ord_x", "fp") },
			in: submit(0, 0), kind: InProgress, orderID: "ord_x"},
		{name: "pending, the client waits: the original's answer", setup: func(f *fixture) { f.results.m[key] = idempotency.Pending("ord_x", "fp") },
			in: submit(time.Second, time.Second), decide: ptr(completed("ord_x", "fp")), kind: Completed, orderID: "ord_x", replayed: true},
		{name: "duplicate inside the window, same request: in progress", setup: func(f *fixture) {
			_, _, _ = f.commands.Publish(context.Background(), events.CreateOrder{KeyHash: key, Nonce: "N0NCE0000000A", Fingerprint: "fp"})
		}, in: submit(0, 0), kind: InProgress, orderID: firstID, published: 2},
		{name: "duplicate inside the window, other request: key reused", setup: func(f *fixture) {
			_, _, _ = f.commands.Publish(context.Background(), events.CreateOrder{KeyHash: key, Nonce: "N0NCE0000000A", Fingerprint: "other"})
		}, in: submit(0, 0), err: &KeyReusedError{}, published: 2},
		{name: "read keeps failing: unavailable, nothing published", setup: func(f *fixture) { f.results.err = timedOut },
			in: submit(0, 0), err: ErrUnavailable},
		{name: "publish refused by the store: unavailable", setup: func(f *fixture) { f.commands.err = malformed },
			in: submit(0, 0), err: ErrUnavailable, published: 1},
		{name: "publish refused while a leader is elected, then stored", setup: func(f *fixture) { f.commands.failFirst, f.commands.failWith = 3, noLeader },
			in: submit(0, 0), kind: Accepted, orderID: firstID, published: 4},
		{name: "ack lost: published again, the duplicate ack is of this request's own command: accepted, not a retry",
			setup: func(f *fixture) { f.commands.failFirst, f.commands.failWith = 1, timedOut },
			in:    submit(0, 0), kind: Accepted, orderID: firstID, published: 2},
		{name: "ack lost, the window holding an earlier request's command with the same body: in progress",
			setup: func(f *fixture) {
				// The same tenant, key, body and nonce (a keyed command has
				// none): only the time it was accepted tells it from this
				// request's own.
				_, _, _ = f.commands.Publish(context.Background(), events.CreateOrder{Tenant: "t", KeyHash: key, Nonce: "N0NCE0000000A", Fingerprint: "fp", AcceptedAt: time.Unix(1, 0).UTC()})
				f.commands.failFirst, f.commands.failWith = 2, timedOut
			},
			in: submit(0, 0), kind: InProgress, orderID: firstID, published: 3},
		{name: "ack lost, decided within the wait: created, not a replay", setup: func(f *fixture) { f.commands.failFirst, f.commands.failWith = 1, timedOut },
			in: submit(time.Second, 0), decide: ptr(completed(firstID, "fp")), kind: Completed, orderID: firstID, published: 2},
		{name: "never confirmed: the outcome is unknown", setup: func(f *fixture) { f.commands.err = timedOut },
			in: submit(0, 0), err: ErrOutcomeUnknown, published: -1},
		{name: "never stored, never confirmed: unavailable", setup: func(f *fixture) { f.commands.err = noLeader },
			in: submit(0, 0), err: ErrUnavailable, published: -1},
		{name: "NATS known to be down: unavailable at once", setup: func(f *fixture) { f.down() }, in: submit(0, 0), err: ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			if tc.decide != nil {
				go f.watcher.send(key, *tc.decide)
			}
			out, err := f.svc.Submit(context.Background(), tc.in)
			switch {
			case tc.err != nil:
				var reused *KeyReusedError
				if !errors.Is(err, tc.err) && !(errors.As(tc.err, &reused) && errors.As(err, &reused)) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case out.Kind != tc.kind || out.OrderID != tc.orderID || out.Replayed != tc.replayed:
				t.Fatalf("outcome %+v, want kind %d order %s replayed %v", out, tc.kind, tc.orderID, tc.replayed)
			}
			if tc.published >= 0 && f.commands.published != tc.published {
				t.Fatalf("%d publishes, want %d", f.commands.published, tc.published)
			}
			if tc.reads != nil && f.results.reads != *tc.reads {
				t.Fatalf("%d reads of the key, want %d", f.results.reads, *tc.reads)
			}
			if tc.published < 0 && f.commands.published < 2 {
				t.Fatalf("%d publishes: the publish was not retried within the budget", f.commands.published)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestWaitersReadTheStoreWhileTheWatcherIsDown: a decision the watcher does
// not deliver is found by reading the store.
func TestWaitersReadTheStoreWhileTheWatcherIsDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.watcher.down = errors.New("no heartbeat")
	go func() {
		time.Sleep(100 * time.Millisecond)
		f.results.mu.Lock()
		f.results.m[key] = idempotency.Pending(firstID, "fp") // an earlier version's claim: not an answer
		f.results.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		f.results.mu.Lock()
		f.results.m[key] = completed(firstID, "fp")
		f.results.mu.Unlock()
	}()
	begin := time.Now()
	out, err := f.svc.Submit(context.Background(), submit(5*time.Second, 0))
	if err != nil || out.Kind != Completed || out.Record.State != idempotency.StateCompleted || time.Since(begin) > time.Second {
		t.Fatalf("%+v %v after %s", out, err, time.Since(begin))
	}
}

func TestReadsRetryWhileNATSIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.results.err = noLeader
	go func() {
		time.Sleep(200 * time.Millisecond)
		f.results.mu.Lock()
		f.results.err = nil
		f.results.m[key] = completed("ord_x", "fp")
		f.results.mu.Unlock()
	}()
	out, err := f.svc.Submit(context.Background(), submit(0, 0))
	if err != nil || out.Kind != Completed || f.results.reads < 2 {
		t.Fatalf("%+v %v after %d reads", out, err, f.results.reads)
	}
}

// TestPublishCutOffByALostConnectionIsSentAgain: an attempt in flight when
// the connection to NATS is lost ends at once (its context is canceled, an
// error that is not NATS's "unavailable"), and the command is sent again
// once the connection is back within the grace: the broker's duplicate ack
// of the request's own command says it is stored.
func TestPublishCutOffByALostConnectionIsSentAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.svc.cfg.ReconnectGrace = f.svc.cfg.RequestTimeout // the goroutine's 10 ms with margin
	f.commands.hangFirst, f.commands.hanging = true, make(chan struct{})
	go f.loseConnectionWhile(f.commands.hanging)
	out, err := f.svc.Submit(context.Background(), submit(0, 0))
	f.commands.mu.Lock()
	defer f.commands.mu.Unlock()
	if err != nil || out.Kind != Accepted || out.OrderID != firstID || f.commands.published != 2 {
		t.Fatalf("%+v %v after %d attempts", out, err, f.commands.published)
	}
}

// TestReadCutOffByALostConnectionIsRetried: so is a read.
func TestReadCutOffByALostConnectionIsRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.svc.cfg.ReconnectGrace = f.svc.cfg.RequestTimeout
	f.results.hanging = make(chan struct{})
	go f.loseConnectionWhile(f.results.hanging)
	out, err := f.svc.Submit(context.Background(), submit(0, 0))
	f.results.mu.Lock()
	defer f.results.mu.Unlock()
	if err != nil || out.Kind != Accepted || f.results.reads != 2 {
		t.Fatalf("%+v %v after %d reads", out, err, f.results.reads)
	}
}

// loseConnectionWhile loses the connection once hanging is closed, and
// makes it again 10 ms later (the tests make the reconnect grace longer).
func (f *fixture) loseConnectionWhile(hanging <-chan struct{}) {
	<-hanging
	f.upMu.Lock()
	down := f.down
	f.upMu.Unlock()
	down()
	time.Sleep(10 * time.Millisecond)
	f.reconnect()
}

func TestDrainCutsWaitsShort(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.svc.Drain()
	begin := time.Now()
	out, err := f.svc.Submit(context.Background(), submit(10*time.Second, 0))
	if err != nil || out.Kind != Accepted || time.Since(begin) > time.Second {
		t.Fatalf("%+v %v after %s", out, err, time.Since(begin))
	}
}

func TestOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	seq, _, _ := f.commands.Publish(ctx, events.CreateOrder{Tenant: "t", KeyHash: key, Nonce: "N0NCE0000000A", AcceptedAt: time.Now()})
	id := events.OrderID(seq, "N0NCE0000000A")

	if _, err := f.svc.Order(ctx, "t", "ord_>", 0); !errors.Is(err, ErrNotFound) || f.orders.reads != 0 {
		t.Fatalf("malformed ID: %v after %d reads", err, f.orders.reads)
	}
	o, err := f.svc.Order(ctx, "t", id, 0)
	if err != nil || o.Status != idempotency.StatusPending {
		t.Fatalf("pending: %+v %v", o, err)
	}
	if _, err := f.svc.Order(ctx, "other", id, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's pending order: %v", err)
	}
	// Long poll: the decision wakes the wait.
	go func() {
		for {
			f.watcher.mu.Lock()
			c := f.watcher.orders[id]
			f.watcher.mu.Unlock()
			if c != nil {
				f.orders.mu.Lock()
				f.orders.m[id] = idempotency.Order{Tenant: "t", Status: idempotency.StatusCreated, Body: []byte("{}")}
				f.orders.mu.Unlock()
				c <- struct{}{}
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	begin := time.Now()
	o, err = f.svc.Order(ctx, "t", id, 10*time.Second)
	if err != nil || o.Status != idempotency.StatusCreated || time.Since(begin) > 5*time.Second {
		t.Fatalf("long poll: %+v %v after %s", o, err, time.Since(begin))
	}
	if _, err := f.svc.Order(ctx, "other", id, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's decided order: %v", err)
	}
	// A decided order is answered from its one read, whatever wait asks
	// for: no decision will wake it.
	f.orders.mu.Lock()
	before := f.orders.reads
	f.orders.mu.Unlock()
	if o, err := f.svc.Order(ctx, "t", id, 10*time.Second); err != nil || o.Status != idempotency.StatusCreated {
		t.Fatalf("a long poll of a decided order: %+v %v", o, err)
	}
	f.orders.mu.Lock()
	n := f.orders.reads - before
	f.orders.mu.Unlock()
	if n != 1 {
		t.Fatalf("a long poll of a decided order read it %d times", n)
	}
	evs, err := f.svc.OrderEvents(ctx, "t", id)
	if err != nil || string(evs) != `[{"event":"`+id+`"}]` {
		t.Fatalf("events: %s %v", evs, err)
	}
}

// TestOrderWhoseResponseIsStoredBeforeItsEvent: the processor stores the
// key's response first and the event just after (ADR 0009). A read in
// between waits for the event; one that outlasts the wait (a crash between
// the two) shows a created order from its stored response, and a rejection
// as pending until its event is stored. The response of another order of the
// key changes nothing.
func TestOrderWhoseResponseIsStoredBeforeItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	seq, _, _ := f.commands.Publish(ctx, events.CreateOrder{Tenant: "t", KeyHash: key, Nonce: "N0NCE0000000A", AcceptedAt: time.Now()})
	id := events.OrderID(seq, "N0NCE0000000A")

	// Another order holds the key: pending at once.
	f.results.m[key] = completed(events.OrderID(99, "N0NCE0000000A"), "fp")
	begin := time.Now()
	if o, err := f.svc.Order(ctx, "t", id, 0); err != nil || o.Status != idempotency.StatusPending || time.Since(begin) > eventLag/2 {
		t.Fatalf("another order's response: %+v %v after %s", o, err, time.Since(begin))
	}
	// Its own response, the event a moment later: the event's order.
	f.results.m[key] = idempotency.Record{State: idempotency.StateCompleted, OrderID: id, Fingerprint: "fp", Status: 201, Body: []byte(`{"from":"response"}`)}
	time.AfterFunc(50*time.Millisecond, func() {
		f.orders.mu.Lock()
		f.orders.m[id] = idempotency.Order{Tenant: "t", Status: idempotency.StatusCreated, Body: []byte(`{"from":"event"}`)}
		f.orders.mu.Unlock()
	})
	if o, err := f.svc.Order(ctx, "t", id, 0); err != nil || string(o.Body) != `{"from":"event"}` {
		t.Fatalf("event a moment later: %+v %v", o, err)
	}
	// No event within the wait: a created order from its response.
	f.orders.mu.Lock()
	delete(f.orders.m, id)
	f.orders.mu.Unlock()
	o, err := f.svc.Order(ctx, "t", id, 0)
	if err != nil || o.Status != idempotency.StatusCreated || string(o.Body) != `{"from":"response"}` {
		t.Fatalf("created, no event yet: %+v %v", o, err)
	}
	// A stored rejection without its event: pending.
	f.results.m[key] = idempotency.Record{State: idempotency.StateCompleted, OrderID: id, Fingerprint: "fp", Status: 422, Body: []byte(`{}`)}
	if o, err := f.svc.Order(ctx, "t", id, 0); err != nil || o.Status != idempotency.StatusPending {
		t.Fatalf("rejected, no event yet: %+v %v", o, err)
	}
}

// TestKeyedOrderIDs: with KeyedOrderIDs the API's commands name the keyed
// form, and the order's ID is made of the command's sequence and the key's
// token (ADR 0010). A keyed order whose key holds another order's decision
// has lost it, and reads say so (SupersededError naming the holder), at once
// or during a long poll; one of the current form reads as pending, as before.
func TestKeyedOrderIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.svc.SetKeyedOrderIDs(true)
	token, _ := events.KeyToken(key)
	out, err := f.svc.Submit(ctx, submit(0, 0))
	id := events.KeyedOrderID(1, token)
	cmd := f.commands.stored[1]
	if err != nil || out.Kind != Accepted || out.OrderID != id || !cmd.Keyed() || cmd.Nonce != "" {
		t.Fatalf("submit: %+v %v, command %+v", out, err, cmd)
	}
	// A retry inside the window names the same order.
	if out, err := f.svc.Submit(ctx, submit(0, 0)); err != nil || out.Kind != InProgress || out.OrderID != id {
		t.Fatalf("retry: %+v %v", out, err)
	}
	if o, err := f.svc.Order(ctx, "t", id, 0); err != nil || o.Status != idempotency.StatusPending {
		t.Fatalf("pending: %+v %v", o, err)
	}
	if _, err := f.svc.Order(ctx, "t", events.KeyedOrderID(1, strings.Repeat("A", events.KeyTokenLen)), 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the sequence of the order with another key's token: %v", err)
	}
	if _, err := f.svc.Order(ctx, "other", id, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant: %v", err)
	}

	// Another order's decision comes to hold the key during a long poll.
	holder := events.KeyedOrderID(7, token)
	time.AfterFunc(50*time.Millisecond, func() {
		f.results.mu.Lock()
		f.results.m[key] = completed(holder, "fp")
		f.results.mu.Unlock()
	})
	begin := time.Now()
	var superseded *SupersededError
	if _, err := f.svc.Order(ctx, "t", id, 10*time.Second); !errors.As(err, &superseded) || superseded.OrderID != holder || time.Since(begin) > 5*time.Second {
		t.Fatalf("long poll: %v after %s, want superseded by %s", err, time.Since(begin), holder)
	}
	if _, err := f.svc.OrderEvents(ctx, "t", id); !errors.As(err, &superseded) || superseded.OrderID != holder {
		t.Fatalf("events: %v", err)
	}
	// A pending claim of an earlier version decides nothing yet.
	f.results.mu.Lock()
	f.results.m[key] = idempotency.Pending(holder, "fp")
	f.results.mu.Unlock()
	if o, err := f.svc.Order(ctx, "t", id, 0); err != nil || o.Status != idempotency.StatusPending {
		t.Fatalf("a pending holder: %+v %v", o, err)
	}
}

func TestNewServiceChecksDependencies(t *testing.T) {
	t.Parallel()
	if _, err := NewService(Config{}, Deps{}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("nil ports accepted")
	}
	if _, err := NewService(Config{RequestTimeout: -1}, Deps{}, nil); err == nil {
		t.Fatal("bad config accepted")
	}
}

// fakeDurable counts the waits and answers with err.
type fakeDurable struct {
	mu    sync.Mutex
	waits int
	err   error
	// synced is the start of the last sync without error; zero: none.
	synced time.Time
}

func (d *fakeDurable) SyncedSince(t time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !t.IsZero() && !d.synced.IsZero() && t.Before(d.synced)
}

func (d *fakeDurable) Wait(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waits++
	return d.err
}

// TestAnswersWaitForTheStoresSync: with Deps.Durable (serve --fsync group)
// every answer that tells what the store holds waits for a sync first (a new
// order, a replay, a key reused, a read of an order and of its events); one
// that tells nothing stored does not; a sync that fails makes a new order's
// outcome unknown and a read unavailable.
func TestAnswersWaitForTheStoresSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	d := &fakeDurable{}
	f.svc.deps.Durable = d
	check := func(what string, want int) {
		t.Helper()
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.waits != want {
			t.Fatalf("%s: %d waits for the sync, want %d", what, d.waits, want)
		}
	}
	out, err := f.svc.Submit(ctx, submit(0, 0))
	if err != nil || out.Kind != Accepted {
		t.Fatalf("submit: %+v %v", out, err)
	}
	check("a new order (202)", 1)
	f.cache.Remember(key, completed(out.OrderID, "fp"))
	if out, err := f.svc.Submit(ctx, submit(0, 0)); err != nil || out.Kind != Completed {
		t.Fatalf("replay: %+v %v", out, err)
	}
	check("a replay", 2)
	// A result this process knew before the last sync started is durable:
	// its replay does not wait; one learnt after that sync's start does.
	known := completed(out.OrderID, "fp")
	known.Seen = time.Now()
	f.cache.Remember(key, known)
	d.mu.Lock()
	d.synced = known.Seen.Add(time.Millisecond)
	d.mu.Unlock()
	if out, err := f.svc.Submit(ctx, submit(0, 0)); err != nil || out.Kind != Completed {
		t.Fatalf("replay: %+v %v", out, err)
	}
	check("a replay of a result synced since", 2)
	known.Seen = known.Seen.Add(2 * time.Millisecond)
	f.cache.Remember(key, known)
	if out, err := f.svc.Submit(ctx, submit(0, 0)); err != nil || out.Kind != Completed {
		t.Fatalf("replay: %+v %v", out, err)
	}
	check("a replay of a result learnt after the last sync started", 3)
	other := submit(0, 0)
	other.Fingerprint = "other"
	if _, err := f.svc.Submit(ctx, other); !errors.As(err, new(*KeyReusedError)) {
		t.Fatalf("key reused: %v", err)
	}
	check("a key reused (422)", 4)
	if _, err := f.svc.Order(ctx, "t", out.OrderID, 0); err != nil {
		t.Fatal(err)
	}
	check("a read of the order", 5)
	f.orders.m[out.OrderID] = idempotency.Order{Tenant: "t", Status: idempotency.StatusCreated, Body: []byte("{}")}
	if _, err := f.svc.OrderEvents(ctx, "t", out.OrderID); err != nil {
		t.Fatal(err)
	}
	check("a read of its events", 6)
	if _, err := f.svc.Order(ctx, "t", events.OrderID(99, "N0NCE0000000A"), 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown order: %v", err)
	}
	check("a read of an order that does not exist", 6)

	d.err = errors.New("EIO")
	fresh := submit(0, 0)
	fresh.KeyHash = idempotency.KeyHash("t", "k2")
	if _, err := f.svc.Submit(ctx, fresh); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a new order whose sync failed: %v, want outcome unknown", err)
	}
	if _, err := f.svc.Order(ctx, "t", out.OrderID, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a read whose sync failed: %v, want unavailable", err)
	}
}
