package server_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/admin"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
	"github.com/orderly-dev/orderly/projections"
)

func snapshot(t *testing.T, kv jetstream.KeyValue) map[string][]byte {
	t.Helper()
	keys, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for key := range keys.Keys() {
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		out[key] = e.Value()
	}
	return out
}

// TestRebuildEqualsLive: rebuilding ORDER_RESULTS from ORDER_EVENTS gives the
// live state byte for byte, and repairs a damaged read model.
func TestRebuildEqualsLive(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.OrderIDs = jsstore.OrderIDsNonce // the form whose answers the bucket holds
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		body := orderlytest.Order("c-" + strconv.Itoa(i))
		if i%4 == 0 {
			body = []byte(`{"customer_id":"c","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}],"total":9}`)
		}
		if r := inst.PostOrder(t, "rebuild-"+strconv.Itoa(i), body); r.Status != http.StatusCreated && r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("setup: %d", r.Status)
		}
	}
	// In this form a 201 or 422 is the stored response, and the order's event
	// follows it (ADR 0009): until the last ones are stored, their responses
	// read as stale (seen once, with the machine loaded).
	orderlytest.Eventually(t, 30*time.Second, "the 30 orders' events", func() bool {
		return len(orderlytest.Events(t, js)) == 30
	})
	results, evs := readModels(t, js)
	rep, err := projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{DryRun: true, MaxDifferences: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() || rep.Events != 30 || rep.Results != 30 {
		t.Fatalf("live state differs from the rebuilt one: %+v", rep)
	}
	// A response as versions before ADR 0009 stored it (no decision time) is
	// the same answer: not a difference.
	someKey := idempotency.KeyHash(api.DefaultTenant, "rebuild-2")
	old, ok, err := results.Get(ctx, someKey)
	if err != nil || !ok || old.DecidedUnixNano == 0 {
		t.Fatalf("record of rebuild-2: %+v %v %v", old, ok, err)
	}
	old.DecidedUnixNano = 0
	if err := results.Save(ctx, someKey, old); err != nil {
		t.Fatal(err)
	}
	if rep, err := projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{DryRun: true}); err != nil || !rep.Equal() {
		t.Fatalf("an earlier version's record counted as a difference: %+v %v", rep, err)
	}

	kv, err := js.KeyValue(ctx, events.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	live := snapshot(t, kv)
	// Damage the read model: lose results, corrupt one, add a stray one, and a
	// pending claim that no event calls for yet (a command in flight).
	keys := make([]string, 0, len(live))
	for key := range live {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys[:5] {
		if err := kv.Purge(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, keys[5], []byte("{\"state\":\"completed\"}\ngarbage")); err != nil {
		t.Fatal(err)
	}
	stray := idempotency.Record{State: idempotency.StateCompleted, OrderID: events.OrderID(1<<40, events.NewNonce()), Fingerprint: "f", Status: 201}
	if _, err := kv.Put(ctx, "stray", stray.Encode()); err != nil {
		t.Fatal(err)
	}
	claim := idempotency.Record{State: idempotency.StatePending, OrderID: events.OrderID(1<<40+1, events.NewNonce()), Fingerprint: "f"}
	if _, err := kv.Put(ctx, "in-flight", claim.Encode()); err != nil {
		t.Fatal(err)
	}

	rep, err = projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{MaxDifferences: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 5 || rep.Different != 1 || rep.Stale != 1 || rep.Written != 6 || rep.Removed != 1 {
		t.Fatalf("repair report: %+v", rep)
	}
	after := snapshot(t, kv)
	delete(after, "in-flight") // kept: claims are not events
	if len(after) != len(live) {
		t.Fatalf("%d results after the rebuild, %d before", len(after), len(live))
	}
	for k, v := range live {
		if !bytes.Equal(after[k], v) {
			t.Fatalf("result %s differs after the rebuild", k)
		}
	}
	if _, err := kv.Get(ctx, "in-flight"); err != nil {
		t.Fatalf("the pending claim was removed: %v", err)
	}
	if err := kv.Purge(ctx, "in-flight"); err != nil {
		t.Fatal(err)
	}
	if rep, _ := projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{DryRun: true}); !rep.Equal() {
		t.Fatalf("after the repair: %+v", rep)
	}
	// The API answers from the repaired read model.
	if r := inst.PostOrder(t, "rebuild-1", orderlytest.Order("c-1")); r.Status != http.StatusCreated {
		t.Fatalf("replay after the rebuild: %d %s", r.Status, r.Body)
	}
}

// TestRebuildLeavesKeyedOrdersToTheirEvents: a keyed order's answer is its
// event (ADR 0010), so a rebuild neither reports it missing from
// ORDER_RESULTS nor writes it there; a record of a keyed order found there
// (as an earlier version's rebuild wrote them) is removed, and the key is
// still answered from its event.
func TestRebuildLeavesKeyedOrdersToTheirEvents(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.OrderIDs = jsstore.OrderIDsKeyed
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	ctx := context.Background()
	type sent struct{ body, answer []byte }
	answers := map[string]sent{}
	for i := 0; i < 12; i++ {
		body := orderlytest.Order("c-" + strconv.Itoa(i))
		if i%4 == 0 {
			body = []byte(`{"customer_id":"c","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}],"total":9}`)
		}
		key := "keyed-rebuild-" + strconv.Itoa(i)
		r := inst.PostOrder(t, key, body)
		if r.Status != http.StatusCreated && r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("setup: %d", r.Status)
		}
		answers[key] = sent{body, r.Body}
	}
	results, evs := readModels(t, js)
	rep, err := projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{DryRun: true, MaxDifferences: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() || rep.Events != 12 || rep.Keyed != 12 || rep.Results != 0 {
		t.Fatalf("dry run over keyed orders: %+v", rep)
	}

	// A record of a keyed order in the bucket: removed as stale.
	p, err := projections.Project(mustLastEvent(t, evs, "keyed-rebuild-1"))
	if err != nil || p.Record == nil {
		t.Fatalf("project: %v", err)
	}
	if err := results.Save(ctx, p.Key, *p.Record); err != nil {
		t.Fatal(err)
	}
	rep, err = projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{MaxDifferences: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Written != 0 || rep.Stale != 1 || rep.Removed != 1 {
		t.Fatalf("rebuild over keyed orders: %+v", rep)
	}
	kv, err := js.KeyValue(ctx, events.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if left := snapshot(t, kv); len(left) != 0 {
		t.Fatalf("%d records left in %s after the rebuild", len(left), events.ResultsBucket)
	}
	for key, a := range answers {
		if r := inst.PostOrder(t, key, a.body); !bytes.Equal(r.Body, a.answer) {
			t.Fatalf("replay of %s after the rebuild: %d %s, want %s", key, r.Status, r.Body, a.answer)
		}
	}
}

// mustLastEvent is the last event of the keyed order of key (tenant default).
func mustLastEvent(t *testing.T, evs *jsstore.Events, key string) []byte {
	t.Helper()
	ev, ok, err := evs.KeyEvent(context.Background(), idempotency.KeyHash(api.DefaultTenant, key))
	if err != nil || !ok {
		t.Fatalf("key event of %s: %v %v", key, ok, err)
	}
	return ev.Data
}

// readModels opens ORDER_RESULTS and ORDER_EVENTS as a rebuild reads them.
func readModels(t *testing.T, js jetstream.JetStream) (*jsstore.Results, *jsstore.Events) {
	t.Helper()
	results, err := jsstore.OpenResults(context.Background(), js, js)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := jsstore.OpenEvents(context.Background(), js, js)
	if err != nil {
		t.Fatal(err)
	}
	return results, evs
}

// TestEventWithoutAKeyHashIsSkipped: an event in ORDER_EVENTS whose
// idempotency_key_hash is not a key hash (the processor never writes one; a
// hostile writer could) is acked and counted by the projector, never
// becomes a subject of ORDER_RESULTS, and is skipped and listed by a
// rebuild. Before, "a.>" was stored under a wildcard subject, and "" was
// refused after a timeout and redelivered for ever.
func TestEventWithoutAKeyHashIsSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Processor: true, Projector: true}
	cfg.Topology.Projector = true
	cfg.OrderIDs = jsstore.OrderIDsNonce // the form whose answers the projector writes
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	results, evs := readModels(t, js)
	fp := idempotency.Fingerprint(decode(t, orderlytest.Order("c")))
	for i, bad := range []struct{ keyHash, orderID string }{
		{keyHash: "a.>"},
		{keyHash: ""},
		{keyHash: idempotency.KeyHash(api.DefaultTenant, "hostile-id"), orderID: "../../admin"},
	} {
		id := events.OrderID(uint64(1000+i), events.NewNonce())
		data, err := json.Marshal(events.NewEvent(events.OrderCreatedType, events.KindCreated, id, time.Now(), events.OrderCreated{
			OrderID: cmp.Or(bad.orderID, id), Tenant: api.DefaultTenant, CustomerID: "c", Currency: "EUR", Items: []events.Item{{SKU: "a", Quantity: 1, UnitPrice: 1}},
			Total: 1, IdempotencyKeyHash: bad.keyHash, RequestFingerprint: fp, AcceptedAt: time.Now(), CreatedAt: time.Now()}))
		if err != nil {
			t.Fatal(err)
		}
		if stored, err := evs.Append(ctx, events.KindCreated, id, data); err != nil || !stored {
			t.Fatalf("append: %v %v", stored, err)
		}
	}
	if r := inst.PostOrder(t, "after-the-hostile-events", orderlytest.Order("c")); r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	settled(t, js) // nothing left unacked
	if n := inst.Metric(t, `orderly_events_skipped_total{reason="undecodable"}`); n != 3 {
		t.Fatalf("%v events skipped as undecodable, want 3", n)
	}
	// The key of the event with a forged order ID holds nothing: a request
	// of it makes an order of its own.
	if r := inst.PostOrder(t, "hostile-id", orderlytest.Order("c")); r.Status != http.StatusCreated || strings.Contains(r.Header.Get("Location"), "admin") {
		t.Fatalf("%d %v %s", r.Status, r.Header, r.Body)
	}
	// Its result is written by the projector after the answer: a rebuild
	// that reads the bucket before then finds one record (once in a full
	// run of the suite).
	settled(t, js)
	if err := results.Snapshot(ctx, func(key string, _ []byte) {
		if !idempotency.ValidKeyHash(key) {
			t.Errorf("ORDER_RESULTS holds %q", key)
		}
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{DryRun: true, MaxDifferences: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() || rep.Unreadable != 3 || rep.Results != 2 || len(rep.Differences) != 3 || !strings.Contains(rep.Differences[0], "a.>") || !strings.Contains(rep.Differences[2], "admin") {
		t.Fatalf("rebuild over the hostile events: %+v", rep)
	}

	// An event stored under one order's subject that says it is another's:
	// the first order's GET does not show the second.
	x, y := events.OrderID(2000, events.NewNonce()), events.OrderID(2001, events.NewNonce())
	data, err := json.Marshal(events.NewEvent(events.OrderCreatedType, events.KindCreated, y, time.Now(), events.OrderCreated{
		OrderID: y, Tenant: api.DefaultTenant, CustomerID: "c-y", Currency: "EUR", Items: []events.Item{{SKU: "a", Quantity: 1, UnitPrice: 1}},
		Total: 1, IdempotencyKeyHash: idempotency.KeyHash(api.DefaultTenant, "another"), RequestFingerprint: fp, AcceptedAt: time.Now(), CreatedAt: time.Now()}))
	if err != nil {
		t.Fatal(err)
	}
	if stored, err := evs.Append(ctx, events.KindCreated, x, data); err != nil || !stored {
		t.Fatalf("append: %v %v", stored, err)
	}
	if r := orderlytest.Do(t, http.MethodGet, inst.URL+idempotency.OrderPath(x), nil); r.Status != http.StatusInternalServerError || bytes.Contains(r.Body, []byte("c-y")) {
		t.Fatalf("GET of the order whose subject holds another's event: %d %s", r.Status, r.Body)
	}
}

// TestForgedResultIsRefused: a record in ORDER_RESULTS that orderly never
// writes (a hostile writer's, or a damaged one) answers no request with
// what it says, stalls no command, and a rebuild removes it. Before, a
// status that is not three digits made net/http panic after the status line
// was chosen, so the problem written by the recovery went out as 200; an
// order ID outside the two forms went into the Location header.
func TestForgedResultIsRefused(t *testing.T) {
	t.Parallel()
	// ORDER_RESULTS holds the answers of nonce orders; a deployment of keyed
	// orders still reads it for the keys its nonce orders took before.
	for _, form := range []string{jsstore.OrderIDsNonce, jsstore.OrderIDsKeyed} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			forgedResultIsRefused(t, form)
		})
	}
}

func forgedResultIsRefused(t *testing.T, form string) {
	ctx := context.Background()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Processor: true, Projector: true}
	cfg.Topology.Projector = true
	cfg.OrderIDs = form
	var log orderlytest.Buffer
	inst := orderlytest.StartLogged(t, cfg, slog.New(slog.NewTextHandler(&log, nil)))
	js := inst.JetStream(t)
	kv, err := js.KeyValue(ctx, events.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	body := orderlytest.Order("c")
	fp := idempotency.Fingerprint(decode(t, body))
	id := events.OrderID(1, events.NewNonce())
	forged := []idempotency.Record{
		{State: idempotency.StateCompleted, OrderID: id, Fingerprint: fp, Status: 1000, ContentType: "application/json", Body: []byte(`{"forged":1}`)},
		{State: idempotency.StateCompleted, OrderID: id, Fingerprint: fp, Status: 42, ContentType: "application/json", Body: []byte(`{"forged":2}`)},
		{State: idempotency.StateCompleted, OrderID: "../../admin", Fingerprint: fp, Status: 201, Location: "/v1/orders/../../admin", ContentType: "application/json", Body: []byte(`{"forged":3}`)},
		{State: idempotency.StatePending, OrderID: "ord_>", Fingerprint: fp},
	}
	for i, r := range forged {
		if _, err := kv.Put(ctx, idempotency.KeyHash(api.DefaultTenant, "forged-"+strconv.Itoa(i)), r.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	// The API's view of the keys has them (a request of such a key reads
	// the store), once its feed delivered them.
	orderlytest.Eventually(t, 10*time.Second, "the forged records to reach the API's view", func() bool {
		return strings.Count(log.String(), "undecodable result") >= len(forged)
	})
	for i, r := range forged {
		resp := inst.PostOrder(t, "forged-"+strconv.Itoa(i), body)
		if resp.Status != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/problem+json" ||
			bytes.Contains(resp.Body, []byte("forged")) || resp.Header.Get("Location") != "" {
			t.Errorf("a request whose key holds %+v: %d %v %s", r, resp.Status, resp.Header, resp.Body)
		}
	}

	// A command that reaches the processor before the API saw its key's
	// record (or published past the API): dead-lettered at once, not
	// redelivered for ever.
	if _, err := kv.Put(ctx, idempotency.KeyHash(api.DefaultTenant, "forged-cmd"), forged[0].Encode()); err != nil {
		t.Fatal(err)
	}
	orderID := publishCommandAs(t, js, form, "forged-cmd", fp, body, idempotency.KeyHash(api.DefaultTenant, "forged-cmd"))
	settled(t, js)
	if n := orderlytest.Stored(t, js, events.DeadLetterStream); n != 1 {
		t.Fatalf("%d dead letters, want the one command of a key with a forged record", n)
	}
	if n := inst.Metric(t, `orderly_pipeline_messages_total{outcome="dead_lettered",pipeline="processor"}`); n != 1 {
		t.Fatalf("%v commands dead-lettered", n)
	}
	if n := inst.Metric(t, `orderly_pipeline_messages_total{outcome="retried",pipeline="processor"}`); n != 0 {
		t.Fatalf("the processor retried a command whose key holds a forged record %v times: no retry can read it", n)
	}

	results, evs := readModels(t, js)
	rep, err := projections.Rebuild(ctx, results, evs, results.TTL(), projections.RebuildOptions{MaxDifferences: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stale != len(forged)+1 || rep.Removed != len(forged)+1 {
		t.Fatalf("rebuild over the forged records: %+v", rep)
	}
	if resp := inst.PostOrder(t, "forged-0", body); resp.Status != http.StatusCreated {
		t.Fatalf("the key after the rebuild: %d %s", resp.Status, resp.Body)
	}
	// The dead-lettered command is decided once replayed, under its own ID.
	var dls []admin.DeadLetter
	if err := admin.DeadLetters(ctx, js, func(d admin.DeadLetter) error { dls = append(dls, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].OrderID != orderID || dls[0].Decision != "undecided" {
		t.Fatalf("dead letters: %+v, want the one of %s, undecided", dls, orderID)
	}
	if res, err := admin.Replay(ctx, js, dls[0], admin.ReplayOptions{Wait: 20 * time.Second}); err != nil || res.Decision != "created" {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if resp := inst.PostOrder(t, "forged-cmd", body); resp.Status != http.StatusCreated || resp.JSON(t)["id"] != orderID {
		t.Fatalf("the replayed order's key: %d %s, want %s", resp.Status, resp.Body, orderID)
	}
}
