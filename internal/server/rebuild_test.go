package server_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/projections"
)

func snapshot(t *testing.T, js jetstream.JetStream, bucket string) map[string][]byte {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
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

// TestRebuildEqualsLive: rebuilding the read models from ORDER_EVENTS gives the
// live state byte for byte, and repairs damaged read models.
func TestRebuildEqualsLive(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
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
	store, err := projections.OpenStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := projections.Rebuild(ctx, js, store, projections.RebuildOptions{DryRun: true, MaxDifferences: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() || rep.Events != 30 || rep.Orders != 30 || rep.Results != 30 {
		t.Fatalf("live state differs from the rebuilt one: %+v", rep)
	}

	liveOrders := snapshot(t, js, events.OrdersBucket)
	liveResults := snapshot(t, js, events.ResultsBucket)
	// Damage the read models: lose orders, corrupt a result, add a stray order.
	orders, _ := js.KeyValue(ctx, events.OrdersBucket)
	results, _ := js.KeyValue(ctx, events.ResultsBucket)
	n := 0
	for id := range liveOrders {
		if n++; n > 5 {
			break
		}
		if err := orders.Purge(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for key := range liveResults {
		if _, err := results.Put(ctx, key, []byte("{\"state\":\"completed\"}\ngarbage")); err != nil {
			t.Fatal(err)
		}
		break
	}
	if _, err := orders.Put(ctx, "ord_01M8MDT443JPW9458J298TZP0M", []byte("{}\n{}")); err != nil {
		t.Fatal(err)
	}

	rep, err = projections.Rebuild(ctx, js, store, projections.RebuildOptions{MaxDifferences: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 5 || rep.Different != 1 || rep.Stale != 1 || rep.Written != 6 || rep.Removed != 1 {
		t.Fatalf("repair report: %+v", rep)
	}
	for name, pair := range map[string][2]map[string][]byte{
		"orders":  {liveOrders, snapshot(t, js, events.OrdersBucket)},
		"results": {liveResults, snapshot(t, js, events.ResultsBucket)},
	} {
		before, after := pair[0], pair[1]
		if len(before) != len(after) {
			t.Fatalf("%s: %d records after the rebuild, %d before", name, len(after), len(before))
		}
		for k, v := range before {
			if !bytes.Equal(after[k], v) {
				t.Fatalf("%s %s differs after the rebuild", name, k)
			}
		}
	}
	if rep, _ := projections.Rebuild(ctx, js, store, projections.RebuildOptions{DryRun: true}); !rep.Equal() {
		t.Fatalf("after the repair: %+v", rep)
	}
	// The API answers from the repaired read models.
	if r := inst.PostOrder(t, "rebuild-1", orderlytest.Order("c-1")); r.Status != http.StatusCreated {
		t.Fatalf("replay after the rebuild: %d %s", r.Status, r.Body)
	}
}
