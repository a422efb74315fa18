package processor

import (
	"math"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
)

// The event a redelivery decides again must be the stored one, byte for
// byte, whichever encoder made either: the hand-written one is go-json's
// output.
func checkCreated(t *testing.T, e events.Event[events.OrderCreated]) {
	t.Helper()
	want, err := gojson.Marshal(e)
	if err != nil {
		if _, ok := appendCreated(nil, e); ok {
			t.Fatalf("appended an event go-json refuses (%v)", err)
		}
		return
	}
	if got := encodeCreated(e); string(got) != string(want) {
		t.Fatalf("encodeCreated\n%s\ngo-json\n%s", got, want)
	}
}

func createdEvent(id, text string, at time.Time, items []events.Item) events.Event[events.OrderCreated] {
	return events.NewEvent(events.OrderCreatedType, events.KindCreated, id, at, events.OrderCreated{
		OrderID: id, Tenant: text, CustomerID: text, Currency: "EUR", Items: items, Total: 7,
		IdempotencyKeyHash: "k", RequestFingerprint: text, AcceptedAt: at.Add(-time.Millisecond).UTC(), CreatedAt: at.UTC(),
	})
}

func TestCreatedEventMatchesGoJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 5, 7, 43, 123456789, time.UTC)
	for _, s := range []string{"c-42", "", "é", "<b>", "a&b", "\u2028", "\xff", "\"", "\\", "\n", "€", "😀"} {
		for _, items := range [][]events.Item{nil, {}, {{SKU: s, Quantity: 1, UnitPrice: math.MaxInt64}, {SKU: "x", Quantity: -1}}} {
			e := createdEvent("ord_"+s, s, at, items)
			checkCreated(t, e)
			e.TraceParent = "00-" + s
			checkCreated(t, e)
			e.TraceState = s
			checkCreated(t, e)
		}
	}
	checkCreated(t, createdEvent("o", "t", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), nil))
	local := createdEvent("o", "t", at, nil)
	local.Data.AcceptedAt = at.In(time.FixedZone("x", -5*3600))
	checkCreated(t, local)
	if _, ok := appendCreated(nil, createdEvent("ord_1", "c-42", at, []events.Item{{SKU: "S", Quantity: 1}})); !ok {
		t.Fatal("a plain event left to go-json")
	}
}

func FuzzCreatedEvent(f *testing.F) {
	f.Add("ord_1", "c-42", "00-abc-01", "SKU-1", int64(2), int64(2495), int64(1764565663123456789), 3)
	f.Add("<", "\u2028", "\xff", "&", int64(-1), int64(math.MaxInt64), int64(-62135596800000000), -1)
	f.Fuzz(func(t *testing.T, id, text, trace, sku string, q, p, nanos int64, n int) {
		var items []events.Item
		if n = n % 40; n >= 0 {
			items = make([]events.Item, n)
			for i := range items {
				items[i] = events.Item{SKU: sku[:i%(len(sku)+1)], Quantity: q, UnitPrice: p + int64(i)}
			}
		}
		e := createdEvent(id, text, time.Unix(0, nanos), items)
		e.TraceParent = trace
		checkCreated(t, e)
	})
}

// Run: go test -run '^$' -bench 'Decide|Project' ./processor/ ./projections/
func BenchmarkDecide(b *testing.B) {
	total := int64(6439)
	cmd := events.CreateOrder{Type: events.CreateOrderType, Tenant: "default", KeyHash: "Q2jNqI6M8i1o3e1VbQy8v2l0yq6m0Zk5eD3bWc7yT4s",
		Fingerprint: "d9Zc1q6yQ0x2m8Vb3n5L7k4j1h0g9f8e7d6c5b4a3Z2", AcceptedAt: time.Now().UTC(),
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", Request: events.OrderRequest{
			CustomerID: "c-42", Currency: "EUR", Total: &total, Items: []events.Item{
				{SKU: "SKU-1", Quantity: 2, UnitPrice: 2495}, {SKU: "SKU-2", Quantity: 1, UnitPrice: 999}, {SKU: "SKU-3", Quantity: 3, UnitPrice: 150}}}}
	b.ReportAllocs()
	for b.Loop() {
		if d := Decide(cmd, "ord_0000000000001WWZAD2XPDAXP2", time.Now()); d.Kind != events.KindCreated {
			b.Fatal(d.Kind)
		}
	}
}
