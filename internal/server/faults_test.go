package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
	"github.com/orderly-dev/orderly/processor"
)

// hookCalls counts the deliveries the processor's hook saw, per customer.
type hookCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hookCalls) add(customer string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[customer]++
	return h.n[customer]
}

func (h *hookCalls) get(customer string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[customer]
}

// TestProcessorCrashOrTimeoutMidCommand: a handler that fails, panics, or
// outlives the ack wait after claiming the key is redelivered; every order is
// created exactly once and nothing is lost.
func TestProcessorCrashOrTimeoutMidCommand(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Topology.AckWait = 2 * time.Second
	cfg.Processor.Timeout = time.Second
	var calls hookCalls
	cfg.ProcessorHooks = processor.Hooks{AfterClaim: func(_ context.Context, cmd events.CreateOrder, delivered int) error {
		calls.add(cmd.Request.CustomerID)
		if delivered > 1 {
			return nil
		}
		switch cmd.Request.CustomerID {
		case "c-error":
			return errors.New("injected: connection reset")
		case "c-panic":
			panic("injected: handler crashed")
		case "c-slow":
			time.Sleep(3 * time.Second) // past the ack wait: the server redelivers meanwhile
		}
		return nil
	}}
	inst := orderlytest.Start(t, cfg)

	customers := []string{"c-error", "c-panic", "c-slow", "c-fine"}
	var wg sync.WaitGroup
	for _, c := range customers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := orderlytest.TryDo(http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order(c),
				"Content-Type: application/json", "Idempotency-Key: fault-"+c, "Prefer: wait=20")
			if err != nil || r.Status != http.StatusCreated {
				t.Errorf("%s: %d %s %v", c, r.Status, r.Body, err)
			}
		}()
	}
	wg.Wait()
	counts := orderlytest.CreatedByKey(t, inst.JetStream(t))
	for _, c := range customers {
		if n := counts[idempotency.KeyHash(api.DefaultTenant, "fault-"+c)]; n != 1 {
			t.Errorf("%s: %d OrderCreated, want 1", c, n)
		}
	}
	for _, c := range customers[:3] {
		if calls.get(c) < 2 {
			t.Errorf("%s: %d deliveries; the fault was not redelivered", c, calls.get(c))
		}
	}
}

// TestPoisonCommandIsDeadLettered: a command that can never succeed goes, after
// the bounded deliveries, to ORDER_COMMANDS_DLQ with the reason, and its key
// answers with a stored 422 order_rejected (reason processing_failed).
func TestPoisonCommandIsDeadLettered(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Processor.MaxAttempts = 3
	var calls hookCalls
	cfg.ProcessorHooks = processor.Hooks{AfterClaim: func(_ context.Context, cmd events.CreateOrder, _ int) error {
		if cmd.Request.CustomerID == "c-poison" {
			calls.add("c-poison")
			return errors.New("injected: the warehouse rejects this customer")
		}
		return nil
	}}
	inst := orderlytest.Start(t, cfg)
	first := inst.PostOrder(t, "poison-1", orderlytest.Order("c-poison"), "Prefer: wait=20")
	if first.Status != http.StatusUnprocessableEntity {
		t.Fatalf("poison: %d %s", first.Status, first.Body)
	}
	p := first.Problem(t)
	if p["code"] != "order_rejected" || p["reason"] != events.ReasonProcessingFailed {
		t.Fatalf("poison answer: %s", first.Body)
	}
	if n := calls.get("c-poison"); n != cfg.Processor.MaxAttempts {
		t.Fatalf("%d deliveries, want the bound of %d", n, cfg.Processor.MaxAttempts)
	}
	replay := inst.PostOrder(t, "poison-1", orderlytest.Order("c-poison"))
	if replay.Status != http.StatusUnprocessableEntity || string(replay.Body) != string(first.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", replay.Status, replay.Body)
	}

	js := inst.JetStream(t)
	dlq, err := js.Stream(context.Background(), events.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	// The answer comes from the stored rejection; the dead letter is written
	// right after it, when the handler returns.
	var m *jetstream.RawStreamMsg
	orderlytest.Eventually(t, 10*time.Second, "the dead letter", func() bool {
		m, err = dlq.GetLastMsgForSubject(context.Background(), events.DeadLetterSubject)
		return err == nil
	})
	if reason := m.Header.Get("reason_poisoned"); !strings.Contains(reason, "the warehouse rejects this customer") {
		t.Fatalf("dead letter reason %q", reason)
	}
	if !strings.Contains(string(m.Data), `"customer_id":"c-poison"`) {
		t.Fatalf("dead letter is not the command: %s", m.Data)
	}
	// Other orders are not held up.
	if r := inst.PostOrder(t, "poison-2", orderlytest.Order("c-fine")); r.Status != http.StatusCreated {
		t.Fatalf("a good order after the poison: %d", r.Status)
	}
}

// TestProjectorDown: without the projector the API still accepts (202); orders
// read from their events show the decision, retries of a key wait for the
// projector (409), and the read model catches up when it comes back.
func TestProjectorDown(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Processor: true}
	cfg.API.Wait = 300 * time.Millisecond
	inst := orderlytest.Start(t, cfg)
	var locs []string
	for _, key := range []string{"proj-1", "proj-2", "proj-3"} {
		r := inst.PostOrder(t, key, orderlytest.Order("c-1"))
		if r.Status != http.StatusAccepted {
			t.Fatalf("%s without projector: %d %s", key, r.Status, r.Body)
		}
		locs = append(locs, r.Header.Get("Location"))
	}
	// The processor decided (the events are stored), the read models lag.
	if n := len(orderlytest.Events(t, inst.JetStream(t))); n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
	if g := orderlytest.Do(t, http.MethodGet, inst.URL+locs[0], nil); g.JSON(t)["status"] != "created" {
		t.Fatalf("GET before the projector: %s", g.Body)
	}
	if r := inst.PostOrder(t, "proj-1", orderlytest.Order("c-1")); r.Status != http.StatusConflict {
		t.Fatalf("a retry before the projector: %d %s", r.Status, r.Body)
	}

	pcfg := orderlytest.Config(t)
	pcfg.Roles = server.Roles{Projector: true}
	orderlytest.Attach(&pcfg, inst.NATSURL(), inst.Creds, natsauth.Projector)
	back := time.Now()
	orderlytest.Start(t, pcfg)
	defer func() {
		t.Logf("recovery: the read models caught up %s after the projector started", time.Since(back).Round(10*time.Millisecond))
	}()
	for i, key := range []string{"proj-1", "proj-2", "proj-3"} {
		r := inst.PostOrder(t, key, orderlytest.Order("c-1"), "Prefer: wait=10")
		if r.Status != http.StatusCreated || r.Header.Get("Location") != locs[i] || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s after the projector caught up: %d %s", key, r.Status, r.Body)
		}
		if g := orderlytest.Do(t, http.MethodGet, inst.URL+locs[i], nil); g.JSON(t)["status"] != "created" {
			t.Fatalf("GET %s: %s", locs[i], g.Body)
		}
	}
}

// TestPanickingHandlerIsDeadLettered: a handler that panics on every delivery
// ends like any failing one: after the bounded deliveries the command is in
// ORDER_COMMANDS_DLQ and its key answers a stored 422 order_rejected.
func TestPanickingHandlerIsDeadLettered(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Processor.MaxAttempts = 3
	var calls hookCalls
	cfg.ProcessorHooks = processor.Hooks{AfterClaim: func(_ context.Context, cmd events.CreateOrder, _ int) error {
		if cmd.Request.CustomerID == "c-panic" {
			calls.add("c-panic")
			panic("injected: handler bug")
		}
		return nil
	}}
	inst := orderlytest.Start(t, cfg)
	r := inst.PostOrder(t, "panic-1", orderlytest.Order("c-panic"), "Prefer: wait=20")
	if r.Status != http.StatusUnprocessableEntity || r.Problem(t)["reason"] != events.ReasonProcessingFailed {
		t.Fatalf("a command whose handler always panics: %d %s", r.Status, r.Body)
	}
	if n := calls.get("c-panic"); n != 3 {
		t.Fatalf("%d deliveries, want 3", n)
	}
	dlq, err := inst.JetStream(t).Stream(context.Background(), events.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	orderlytest.Eventually(t, 10*time.Second, "the dead letter", func() bool {
		m, err = dlq.GetLastMsgForSubject(context.Background(), events.DeadLetterSubject)
		return err == nil
	})
	if !strings.Contains(m.Header.Get("reason_poisoned"), "injected: handler bug") {
		t.Fatalf("dead letter reason %q", m.Header.Get("reason_poisoned"))
	}
}

// TestTwoPoisonedCommandsOfOneKeyAreBothDeadLettered: two commands that can
// never be processed, with one Nats-Msg-Id (one key), sent past the command
// window: each gets its own dead letter.
func TestTwoPoisonedCommandsOfOneKeyAreBothDeadLettered(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Topology.DedupWindow = time.Second
	cfg.Topology.ResultTTL = time.Hour
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	ctx := context.Background()
	key := idempotency.KeyHash(api.DefaultTenant, "poison-key")
	for i, body := range []string{`{"type":"orderly.command.create_order.v1","nonce":"bad"}`, `{"type":"unknown"}`} {
		if i == 1 {
			time.Sleep(1500 * time.Millisecond) // past the window: the broker stores the second
		}
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: events.CommandSubject, Data: []byte(body),
			Header: nats.Header{jetstream.MsgIDHeader: []string{key}}})
		if err != nil || ack.Duplicate {
			t.Fatalf("publish %d: %+v %v", i, ack, err)
		}
	}
	dlq, err := js.Stream(ctx, events.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	orderlytest.Eventually(t, 15*time.Second, "two dead letters", func() bool {
		info, err := dlq.Info(ctx)
		return err == nil && info.State.Msgs == 2
	})
}
