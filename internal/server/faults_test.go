package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
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
	// The answers come from the stored responses; the events of the faulted
	// orders follow with their redeliveries.
	var counts map[string]int
	orderlytest.Eventually(t, 20*time.Second, "every order's event", func() bool {
		counts = orderlytest.CreatedByKey(t, inst.JetStream(t))
		return len(counts) == len(customers)
	})
	for _, c := range customers {
		if n := counts[idempotency.KeyHash(api.DefaultTenant, "fault-"+c)]; n != 1 {
			t.Errorf("%s: %d OrderCreated, want 1", c, n)
		}
		// The event stored after the crash is the decision the response was
		// made of: the order reads back as the 201 said, byte for byte.
		answer := inst.PostOrder(t, "fault-"+c, orderlytest.Order(c))
		got := orderlytest.Do(t, http.MethodGet, inst.URL+answer.Header.Get("Location"), nil)
		if got.Status != http.StatusOK || string(got.Body) != string(answer.Body) {
			t.Errorf("%s: GET %d %s, the 201 said %s", c, got.Status, got.Body, answer.Body)
		}
	}
	// A command batched with the slow one may have been redelivered (the
	// ack wait passed) and decided before its first attempt got to the hook.
	for _, c := range customers[:3] {
		orderlytest.Eventually(t, 10*time.Second, c+" tried again after its fault", func() bool { return calls.get(c) >= 2 })
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
	cfg.ProcessorHooks = processor.Hooks{BeforeClaim: failFor("c-poison", "injected: the warehouse rejects this customer", &calls)}
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

// TestProjectorIsOptional: without a projector every order is answered
// (201), replayed and read back, because the processor stores each key's
// response as its claim (ADR 0009). A projector started afterwards writes
// the same responses again from the events: every key's stored bytes stay
// as they were.
func TestProjectorIsOptional(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Processor: true}
	cfg.Topology.Projector = true        // the optional projector's consumer, for the one started below
	cfg.OrderIDs = jsstore.OrderIDsNonce // keyed orders keep no record (TestProjectorLeavesKeyedOrders)
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	results, err := jsstore.OpenResults(ctx, js, js)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"proj-1", "proj-2", "proj-3"}
	stored := map[string][]byte{}
	for _, key := range keys {
		r := inst.PostOrder(t, key, orderlytest.Order("c-1"))
		if r.Status != http.StatusCreated {
			t.Fatalf("%s without projector: %d %s", key, r.Status, r.Body)
		}
		if g := orderlytest.Do(t, http.MethodGet, inst.URL+r.Header.Get("Location"), nil); g.Status != http.StatusOK || string(g.Body) != string(r.Body) {
			t.Fatalf("GET %s: %d %s", key, g.Status, g.Body)
		}
		if again := inst.PostOrder(t, key, orderlytest.Order("c-1")); again.Status != http.StatusCreated || string(again.Body) != string(r.Body) ||
			again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a retry of %s: %d %s", key, again.Status, again.Body)
		}
		rec, ok, err := results.Get(ctx, idempotency.KeyHash(api.DefaultTenant, key))
		if err != nil || !ok {
			t.Fatalf("record of %s: %v %v", key, ok, err)
		}
		stored[key] = rec.Encode()
	}

	pcfg := orderlytest.Config(t)
	pcfg.Roles = server.Roles{Projector: true}
	orderlytest.Attach(&pcfg, inst.NATSURL(), inst.Creds, natsauth.Projector)
	orderlytest.Start(t, pcfg)
	settled(t, js)
	for _, key := range keys {
		rec, revision, _, err := results.Revision(ctx, idempotency.KeyHash(api.DefaultTenant, key))
		if err != nil || string(rec.Encode()) != string(stored[key]) {
			t.Fatalf("%s after the projector: %q (%v), the processor stored %q", key, rec.Encode(), err, stored[key])
		}
		if revision < 2 {
			t.Fatalf("%s: revision %d: the projector did not write it again", key, revision)
		}
	}
}

// TestProjectorLeavesKeyedOrders: a projector over keyed orders writes
// nothing to ORDER_RESULTS (their events answer their keys) and counts them.
func TestProjectorLeavesKeyedOrders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Processor: true, Projector: true}
	cfg.Topology.Projector = true
	cfg.OrderIDs = jsstore.OrderIDsKeyed
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	for _, key := range []string{"kproj-1", "kproj-2"} {
		if r := inst.PostOrder(t, key, orderlytest.Order("c-1")); r.Status != http.StatusCreated {
			t.Fatalf("%s: %d %s", key, r.Status, r.Body)
		}
	}
	settled(t, js)
	kv, err := js.KeyValue(ctx, events.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if left := snapshot(t, kv); len(left) != 0 {
		t.Fatalf("the projector wrote %d records of keyed orders", len(left))
	}
	if metrics := string(orderlytest.Do(t, http.MethodGet, inst.URL+"/metrics", nil).Body); !strings.Contains(metrics, `orderly_events_skipped_total{reason="keyed"} 2`) {
		t.Fatalf("skipped keyed events not counted:\n%s", metrics)
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
	cfg.ProcessorHooks = processor.Hooks{BeforeClaim: func(_ context.Context, cmd events.CreateOrder, _ int) error {
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

// TestFailureAfterTheDecisionKeepsIt: once the key holds the order's
// decision (its stored response, ADR 0009), the answer is sent and stands: a
// handler that then fails on every delivery does not turn it into a
// rejection. After the bounded deliveries the command is dead-lettered and
// the event of that same decision is stored, once.
func TestFailureAfterTheDecisionKeepsIt(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Processor.MaxAttempts = 3
	var calls hookCalls
	cfg.ProcessorHooks = processor.Hooks{AfterClaim: failFor("c-after", "injected: fails after the decision is stored", &calls)}
	inst := orderlytest.Start(t, cfg)
	r := inst.PostOrder(t, "after-1", orderlytest.Order("c-after"), "Prefer: wait=20")
	if r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	js := inst.JetStream(t)
	dlq, err := js.Stream(context.Background(), events.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	orderlytest.Eventually(t, 20*time.Second, "the dead letter", func() bool {
		_, err = dlq.GetLastMsgForSubject(context.Background(), events.DeadLetterSubject)
		return err == nil
	})
	if n := calls.get("c-after"); n != cfg.Processor.MaxAttempts {
		t.Fatalf("%d deliveries, want the bound of %d", n, cfg.Processor.MaxAttempts)
	}
	evs := orderlytest.Events(t, js)
	if len(evs) != 1 || evs[0].Type != events.OrderCreatedType || evs[0].Subject != r.JSON(t)["id"] {
		t.Fatalf("events %+v, want the one OrderCreated of %s", evs, r.JSON(t)["id"])
	}
	got := orderlytest.Do(t, http.MethodGet, inst.URL+r.Header.Get("Location"), nil)
	replay := inst.PostOrder(t, "after-1", orderlytest.Order("c-after"))
	if got.Status != http.StatusOK || string(got.Body) != string(r.Body) || replay.Status != http.StatusCreated || string(replay.Body) != string(r.Body) {
		t.Fatalf("GET %d %s, replay %d %s; the answer was %s", got.Status, got.Body, replay.Status, replay.Body, r.Body)
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

// failFor is a processor hook that fails every delivery of the customer's
// commands with msg, counting them in calls.
func failFor(customer, msg string, calls *hookCalls) func(context.Context, events.CreateOrder, int) error {
	return func(_ context.Context, cmd events.CreateOrder, _ int) error {
		if cmd.Request.CustomerID != customer {
			return nil
		}
		calls.add(customer)
		return errors.New(msg)
	}
}

// TestReplayOfHeaderIsTrustedOnlyOnTheReplaySubject: the processor makes an
// order's ID of the sequence a command's Orderly-Replay-Of header names only
// on the replay subject (which only the operator may publish to) and only
// for an earlier sequence; anywhere else the command's own sequence makes
// the ID, so a command cannot take the ID of another order.
func TestReplayOfHeaderIsTrustedOnlyOnTheReplaySubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	first := inst.PostOrder(t, "replay-of-1", orderlytest.Order("c"))
	if first.Status != http.StatusCreated {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	js := inst.JetStream(t)
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct{ subject, replayOf string }{
		{events.CommandSubject, "1"},         // a command that names an earlier order
		{events.ReplaySubject, "1000000000"}, // a replay that names a later sequence
	} {
		nonce := events.NewNonce()
		cmd := events.CreateOrder{Type: events.CreateOrderType, Nonce: nonce, Tenant: api.DefaultTenant,
			KeyHash: idempotency.KeyHash(api.DefaultTenant, fmt.Sprintf("replay-of-forged-%d", i)), Fingerprint: "fp", AcceptedAt: time.Now(),
			Request: events.OrderRequest{CustomerID: "c", Currency: "EUR", Items: []events.Item{{SKU: "a", Quantity: 1, UnitPrice: 1}}}}
		data, err := json.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(tc.subject)
		msg.Data = data
		msg.Header.Set(events.HeaderReplayOf, tc.replayOf)
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		own := events.OrderID(ack.Sequence, nonce)
		orderlytest.Eventually(t, 10*time.Second, "the order under its own sequence", func() bool {
			_, ok, err := evs.Event(ctx, own)
			return ok && err == nil
		})
		seq, _ := strconv.ParseUint(tc.replayOf, 10, 64)
		if _, ok, err := evs.Event(ctx, events.OrderID(seq, nonce)); ok || err != nil {
			t.Fatalf("%s with %s: %s: an order under the sequence of the header (%v)", tc.subject, events.HeaderReplayOf, tc.replayOf, err)
		}
	}
}

// TestConsumerMadeAgainDeliversWhatWasNotHandled: a command that fails and
// is tried again (here its claim, until the test lets it through) holds
// its consumer's acknowledgement floor below it while the commands after it
// are decided, so the events stored after it say no more than its own
// sequence (ADR 0031). The consumer, removed and made again from what the
// newest event says, delivers it again, and it is decided once; so is every
// order after it.
func TestConsumerMadeAgainDeliversWhatWasNotHandled(t *testing.T) {
	t.Parallel()
	var hold atomic.Bool
	hold.Store(true)
	cfg := orderlytest.Config(t)
	cfg.DecidedBelowRefresh = 50 * time.Millisecond
	cfg.Processor.MaxAttempts = 1000 // tried again, never dead-lettered here
	cfg.ProcessorHooks = processor.Hooks{BeforeClaim: func(_ context.Context, cmd events.CreateOrder, _ int) error {
		if hold.Load() && cmd.Request.CustomerID == "c-held" {
			return errors.New("held by the test")
		}
		return nil
	}}
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	ctx := context.Background()
	if r := inst.PostOrder(t, "first", orderlytest.Order("c-1"), "Prefer: wait=10"); r.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	if r := inst.PostOrder(t, "held", orderlytest.Order("c-held"), "Prefer: respond-async"); r.Status != http.StatusAccepted {
		t.Fatalf("held: %d %s", r.Status, r.Body)
	}
	held := commandsStored(t, js)
	keys := []string{"first", "held"}
	var said uint64
	for i := 0; said != held; i++ {
		key := fmt.Sprintf("after-%d", i)
		if r := inst.PostOrder(t, key, orderlytest.Order("c-1"), "Prefer: wait=10"); r.Status != http.StatusCreated {
			t.Fatalf("%s: %d %s", key, r.Status, r.Body)
		}
		keys = append(keys, key)
		if said = newestDecidedBelow(t, js); said > held {
			t.Fatalf("an event says every command below %d was handled; command %d was not", said, held)
		}
		if i == 100 {
			t.Fatalf("the newest event says %d after %d orders, want %d (the held command's)", said, i+1, held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := js.DeleteConsumer(ctx, events.CommandStream, jsstore.ProcessorConsumer); err != nil {
		t.Fatal(err)
	}
	hold.Store(false)
	if err := inst.Cfg.Topology.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer); err != nil {
		t.Fatal(err)
	} else if cc := c.CachedInfo().Config; cc.OptStartSeq != held {
		t.Errorf("the consumer was made again as %s from %d, want from the held command, %d", cc.DeliverPolicy, cc.OptStartSeq, held)
	}
	if r := inst.PostOrder(t, "held", orderlytest.Order("c-held"), "Prefer: wait=20"); r.Status != http.StatusCreated {
		t.Fatalf("the held order after the consumer was made again: %d %s", r.Status, r.Body)
	}
	orderlytest.Eventually(t, 15*time.Second, "every command delivered again acked", func() bool {
		c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
		return err == nil && c.CachedInfo().NumPending == 0 && c.CachedInfo().NumAckPending == 0
	})
	counts := orderlytest.CreatedByKey(t, js)
	for _, key := range keys {
		if n := counts[idempotency.KeyHash(api.DefaultTenant, key)]; n != 1 {
			t.Errorf("%s: %d orders", key, n)
		}
	}
}

// newestDecidedBelow is the header events.HeaderDecidedBelow of the newest
// event (0: none).
func newestDecidedBelow(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.EventSubjects)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseUint(m.Header.Get(events.HeaderDecidedBelow), 10, 64)
	return n
}

// commandsStored is ORDER_COMMANDS' last sequence.
func commandsStored(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), events.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// TestDeletedConsumerIsReportedAndComesBack: the processor's durable
// consumer deleted while orderly runs (by hand, `nats consumer rm`, or a
// restore that did not bring it back). Nothing is decided then, and on the
// code before orderly said nothing: ready, orders accepted and pending for
// ever, the fetch errors logged at debug level only. Now the pipeline looks
// its consumer up after three failed pulls: /readyz names it
// (processor_consumer) and the error says what makes it again; once it
// exists again (orderly setup), the accepted order is decided and orderly
// is ready, without a restart.
func TestDeletedConsumerIsReportedAndComesBack(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.DecidedBelowRefresh = 50 * time.Millisecond
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	ctx := context.Background()
	keys := []string{"before-1", "before-2", "while-gone"}
	for _, key := range keys[:2] {
		if r := inst.PostOrder(t, key, orderlytest.Order("c-1"), "Prefer: wait=10"); r.Status != http.StatusCreated {
			t.Fatalf("%s: %d %s", key, r.Status, r.Body)
		}
	}
	// Orders until the newest event says that the commands before it were
	// all handled (the processor reads its consumer's floor every 50 ms).
	var said uint64
	for i := 0; said < 3; i++ {
		key := fmt.Sprintf("before-more-%d", i)
		if r := inst.PostOrder(t, key, orderlytest.Order("c-1"), "Prefer: wait=10"); r.Status != http.StatusCreated {
			t.Fatalf("%s: %d %s", key, r.Status, r.Body)
		}
		keys = append(keys, key)
		said = newestDecidedBelow(t, js)
		if i == 100 {
			t.Fatalf("no event says which commands were handled after %d orders", i+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := commandsStored(t, js)
	if err := js.DeleteConsumer(ctx, events.CommandStream, jsstore.ProcessorConsumer); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	r := inst.PostOrder(t, "while-gone", orderlytest.Order("c-1"), "Prefer: respond-async")
	if r.Status != http.StatusAccepted {
		t.Fatalf("an order while the consumer is gone: %d %s", r.Status, r.Body)
	}
	var body []byte
	orderlytest.Eventually(t, 15*time.Second, "/readyz to name the missing consumer", func() bool {
		rz, ok := readyz(inst.URL)
		body = rz.Body
		return !ok && bytes.Contains(rz.Body, []byte(`"processor_consumer"`))
	})
	t.Logf("not ready %s after the deletion: %s", time.Since(deleted).Round(100*time.Millisecond), body)
	if !bytes.Contains(body, []byte("orderly setup")) {
		t.Errorf("/readyz does not say what makes the consumer again: %s", body)
	}
	if err := inst.Cfg.Topology.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	made := time.Now()
	orderlytest.Eventually(t, 15*time.Second, "ready once the consumer exists again", func() bool { _, ok := readyz(inst.URL); return ok })
	if r := inst.PostOrder(t, "while-gone", orderlytest.Order("c-1"), "Prefer: wait=10"); r.Status != http.StatusCreated {
		t.Fatalf("the order accepted while the consumer was gone: %d %s", r.Status, r.Body)
	}
	t.Logf("ready and the order decided %s after the consumer was made again", time.Since(made).Round(100*time.Millisecond))
	// The new consumer started at the sequence the newest event said, not
	// at the first command: the commands below it, all handled, are not
	// delivered again; those from it on (some decided before, and the one
	// accepted while the consumer was gone) are, and each is decided as
	// before, nothing stored twice.
	orderlytest.Eventually(t, 15*time.Second, "every command from where the events said delivered and acked", func() bool {
		c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
		if err != nil {
			return false
		}
		info := c.CachedInfo()
		return info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer >= 1
	})
	c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
	if err != nil {
		t.Fatal(err)
	}
	info := c.CachedInfo()
	if info.Config.DeliverPolicy != jetstream.DeliverByStartSequencePolicy || info.Config.OptStartSeq != said || said > before {
		t.Errorf("the consumer was made again as %s from %d; want from %d, which the newest event said (%d commands before the removal)",
			info.Config.DeliverPolicy, info.Config.OptStartSeq, said, before)
	}
	if want := before + 1 - said + 1; info.Delivered.Consumer != want {
		t.Errorf("the consumer made again delivered %d commands, want %d (from %d to %d)", info.Delivered.Consumer, want, said, before+1)
	}
	t.Logf("made again from command %d of %d: %d delivered again", said, before+1, info.Delivered.Consumer)
	counts := orderlytest.CreatedByKey(t, js)
	for _, key := range keys {
		if n := counts[idempotency.KeyHash(api.DefaultTenant, key)]; n != 1 {
			t.Errorf("%s: %d orders", key, n)
		}
	}
}
