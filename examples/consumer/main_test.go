package main

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestConsumerGetsEveryOrderOnce runs the example against a real orderly: every
// created order reaches the handler exactly once, a failing handler gets the
// event again, rejections and replays do not reach it, and a restarted consumer
// does not see handled events again.
func TestConsumerGetsEveryOrderOnce(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	// The operator makes the service's consumer (orderly events consumer add
	// test-billing --type created); the service connects as orderly's events
	// user, as a downstream team would.
	cfg, err := jsstore.EventsConsumerConfig("test-billing", events.KindCreated, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inst.JetStream(t).CreateConsumer(context.Background(), events.EventStream, cfg); err != nil {
		t.Fatal(err)
	}
	js := eventsUser(t, inst)

	var mu sync.Mutex
	handled := map[string]int{}
	failedOnce := false
	handle := func(_ context.Context, o events.OrderCreated) error {
		mu.Lock()
		defer mu.Unlock()
		if o.CustomerID == "c-flaky" && !failedOnce {
			failedOnce = true
			return errors.New("billing is down")
		}
		handled[o.OrderID]++
		return nil
	}
	seen := NewMemorySeen()
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = Run(ctx, js, "test-billing", seen, handle) }()
		return func() { cancel(); <-done }
	}
	stop := run()

	want := map[string]bool{}
	for i := 0; i < 20; i++ {
		customer := "c-" + strconv.Itoa(i)
		if i == 7 {
			customer = "c-flaky"
		}
		r := inst.PostOrder(t, "consumer-"+strconv.Itoa(i), orderlytest.Order(customer))
		if r.Status != http.StatusCreated {
			t.Fatalf("order %d: %d", i, r.Status)
		}
		want[r.JSON(t)["id"].(string)] = true
		inst.PostOrder(t, "consumer-"+strconv.Itoa(i), orderlytest.Order(customer)) // a replay: no new event
	}
	inst.PostOrder(t, "consumer-rejected", []byte(`{"customer_id":"c","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}],"total":3}`))

	orderlytest.Eventually(t, 15*time.Second, "every order handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == len(want)
	})
	stop()
	// A restarted consumer continues where it acked: nothing comes twice.
	stop = run()
	inst.PostOrder(t, "consumer-late", orderlytest.Order("c-late"))
	orderlytest.Eventually(t, 15*time.Second, "the late order", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == len(want)+1
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Errorf("order %s handled %d times", id, n)
		}
	}
	for id := range want {
		if handled[id] != 1 {
			t.Errorf("order %s not handled", id)
		}
	}
	if !failedOnce {
		t.Fatal("the flaky order never failed: the retry path was not exercised")
	}
}

// eventsUser connects to inst's NATS as orderly's events user.
func eventsUser(t *testing.T, inst *orderlytest.Instance) jetstream.JetStream {
	t.Helper()
	auth, err := nats.NkeyOptionFromSeed(inst.Creds.SeedPath(natsauth.Events))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(inst.NATSURL(), auth, nats.CustomInboxPrefix(InboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestRunNamesTheMissingConsumer: a service whose consumer the operator has
// not made yet is told the command that makes it (the events user may not
// make one itself).
func TestRunNamesTheMissingConsumer(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, eventsUser(t, inst), "shipping", NewMemorySeen(), func(context.Context, events.OrderCreated) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "orderly events consumer add shipping") {
		t.Fatalf("Run without its consumer: %v, want an error naming orderly events consumer add shipping", err)
	}
}

// TestRunNamesTheRefusedKey: a service that binds with a key that may not use
// its consumer (a service's own key on another service's consumer, the shared
// events user on a consumer whose service has a key of its own) is told at
// once that NATS refused the key, not after the request's 5 s timeout as
// "context deadline exceeded".
func TestRunNamesTheRefusedKey(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	// The operator gave billing a key of its own before orderly started
	// (NATS loads a service's account when it starts).
	creds := natsauth.Credentials{Dir: filepath.Join(cfg.DataDir, "credentials")}
	if err := creds.Init(); err != nil {
		t.Fatal(err)
	}
	if err := creds.AddService("billing"); err != nil {
		t.Fatal(err)
	}
	inst := orderlytest.Start(t, cfg)
	for _, name := range []string{"billing", "shipping"} {
		c, err := jsstore.EventsConsumerConfig(name, events.KindCreated, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inst.JetStream(t).CreateConsumer(context.Background(), events.EventStream, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ seed, durable string }{
		{creds.ServiceSeedPath("billing"), "shipping"},
		{creds.SeedPath(natsauth.Events), "billing"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ctx, denied := context.WithCancelCause(ctx)
		auth, err := nats.NkeyOptionFromSeed(tc.seed)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(inst.NATSURL(), auth, nats.CustomInboxPrefix(InboxPrefix), nats.ErrorHandler(StopWhenDenied(denied)))
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		err = Run(ctx, js, tc.durable, NewMemorySeen(), func(context.Context, events.OrderCreated) error { return nil })
		took := time.Since(begin)
		nc.Close()
		denied(nil)
		cancel()
		if err == nil || !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "consumer "+tc.durable+": NATS refused this key") || took > 2*time.Second {
			t.Errorf("%s on consumer %s: %v after %v, want at once an error that NATS refused the key", filepath.Base(tc.seed), tc.durable, err, took)
		}
	}
}

// TestOptionsKeepTheServiceConnected: the service reconnects for ever
// (nats.go's default gives up after 60 tries, two minutes of an outage, and
// the service then waited for events that never came) and pings its server
// often enough to leave one that hangs within 15 s.
func TestOptionsKeepTheServiceConnected(t *testing.T) {
	o := nats.GetDefaultOptions()
	for _, opt := range Options(func(error) {}) {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.MaxReconnect >= 0 {
		t.Errorf("MaxReconnect %d: the service gives up reconnecting", o.MaxReconnect)
	}
	if stale := time.Duration(o.MaxPingsOut+1) * o.PingInterval; stale > 15*time.Second {
		t.Errorf("pings every %s, %d outstanding: a hung server is left after %s", o.PingInterval, o.MaxPingsOut, stale)
	}
	if o.InboxPrefix != InboxPrefix || o.AsyncErrorCB == nil || o.ClosedCB == nil {
		t.Errorf("inbox prefix %q, error handler %v, closed handler %v", o.InboxPrefix, o.AsyncErrorCB != nil, o.ClosedCB != nil)
	}
}

// TestRunEndsWhenTheConnectionCloses: a connection closed for good (here by
// the test; in a service, after a fatal error) ends Run at once with an
// error that says so, so that the service exits for its supervisor to start
// it again, instead of waiting for events that never come.
func TestRunEndsWhenTheConnectionCloses(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	cfg, err := jsstore.EventsConsumerConfig("closing", events.KindCreated, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inst.JetStream(t).CreateConsumer(context.Background(), events.EventStream, cfg); err != nil {
		t.Fatal(err)
	}
	auth, err := nats.NkeyOptionFromSeed(inst.Creds.SeedPath(natsauth.Events))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx, end := context.WithCancelCause(ctx)
	nc, err := nats.Connect(inst.NATSURL(), append(Options(end), auth)...)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, js, "closing", NewMemorySeen(), func(context.Context, events.OrderCreated) error {
			select {
			case handled <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	if r := inst.PostOrder(t, "close-1", orderlytest.Order("c-1")); r.Status != http.StatusCreated {
		t.Fatalf("POST: %d %s", r.Status, r.Body)
	}
	select {
	case <-handled: // consuming
	case <-time.After(10 * time.Second):
		t.Fatal("the order's event was not handled")
	}
	closed := time.Now()
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, errClosed) || !strings.Contains(err.Error(), "consumer closing: the NATS connection was closed") {
			t.Errorf("Run: %v", err)
		}
		t.Logf("Run returned %s after the close: %v", time.Since(closed).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of its connection's close")
	}
}
