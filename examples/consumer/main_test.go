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
