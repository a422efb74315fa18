package projections

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
)

func TestResultRecordRoundTrip(t *testing.T) {
	t.Parallel()
	body := []byte("{\"id\":\"x\"}\n\x00binary\n")
	r := Result{State: StateCompleted, OrderID: "ord_x", Fingerprint: "fp", Status: 201, Location: "/v1/orders/ord_x", ContentType: "application/json", Body: body}
	got, err := DecodeResult(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Body, body) || got.Status != 201 || got.Location != r.Location || got.State != StateCompleted {
		t.Fatalf("round trip: %+v", got)
	}
	for _, bad := range [][]byte{nil, []byte("{}"), []byte("{\"state\":\"weird\"}\n"), []byte("nope\n")} {
		if _, err := DecodeResult(bad); err == nil {
			t.Errorf("DecodeResult(%q) succeeded", bad)
		}
	}
}

func event[T any](typ string, k events.Kind, id string, d T) []byte {
	b, _ := json.Marshal(events.NewEvent(typ, k, id, time.Unix(1700000000, 0), d))
	return b
}

func TestProjectIsPureAndServesOneBody(t *testing.T) {
	t.Parallel()
	created := event(events.OrderCreatedType, events.KindCreated, "ord_1", events.OrderCreated{
		OrderID: "ord_1", Tenant: "t", CustomerID: "c", Currency: "EUR",
		Items: []events.Item{{SKU: "a", Quantity: 1, UnitPrice: 5}}, Total: 5,
		IdempotencyKeyHash: "k", RequestFingerprint: "fp", AcceptedAt: time.Unix(1700000000, 0), CreatedAt: time.Unix(1700000001, 0),
	})
	a, err := Project(created)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Project(created)
	if !bytes.Equal(a.Order.Body, b.Order.Body) || !bytes.Equal(a.Result.Encode(), b.Result.Encode()) {
		t.Fatal("projecting one event twice gave different bytes")
	}
	if a.Result.Status != http.StatusCreated || !bytes.Equal(a.Result.Body, a.Order.Body) || a.Key != "k" || a.Order.Tenant != "t" {
		t.Fatalf("created projection: %+v", a)
	}
}

func TestProjectRejected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason     string
		holdsKey   bool
		wantStatus int
	}{
		{events.ReasonTotalMismatch, true, http.StatusUnprocessableEntity},
		{events.ReasonDuplicate, false, 0},
		{events.ReasonKeyReused, false, 0},
	} {
		p, err := Project(event(events.OrderRejectedType, events.KindRejected, "ord_2", events.OrderRejected{
			OrderID: "ord_2", Tenant: "t", Reason: tc.reason, Detail: "d", IdempotencyKeyHash: "k", RequestFingerprint: "fp",
		}))
		if err != nil {
			t.Fatal(err)
		}
		if p.Order.Status != StatusRejected {
			t.Fatalf("%s: order status %s", tc.reason, p.Order.Status)
		}
		if (p.Result != nil) != tc.holdsKey {
			t.Fatalf("%s: result %+v, want one: %v", tc.reason, p.Result, tc.holdsKey)
		}
		if p.Result != nil && (p.Result.Status != tc.wantStatus || !bytes.Contains(p.Result.Body, []byte(`"code":"order_rejected"`))) {
			t.Fatalf("%s: result %d %s", tc.reason, p.Result.Status, p.Result.Body)
		}
	}
	if _, err := Project([]byte(`{"type":"orderly.order.shipped.v1"}`)); err == nil {
		t.Fatal("unknown type projected")
	}
}

func TestFanoutKeepsLatest(t *testing.T) {
	t.Parallel()
	var f fanout[int]
	s := f.subscribe("k")
	other := f.subscribe("other")
	f.publish("k", 1)
	f.publish("k", 2) // the waiter has not read 1: it gets 2
	if v := <-s.C; v != 2 {
		t.Fatalf("got %d, want the latest value 2", v)
	}
	select {
	case v := <-other.C:
		t.Fatalf("a waiter of another key got %d", v)
	default:
	}
	if f.count() != 2 {
		t.Fatalf("count %d", f.count())
	}
	s.Close()
	other.Close()
	if f.count() != 0 || len(f.subs) != 0 {
		t.Fatalf("after Close: count %d, %d keys", f.count(), len(f.subs))
	}
}

// TestRecordHeadersAreJSON: the hand-written headers decode to what was encoded,
// whatever the strings hold.
func TestRecordHeadersAreJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"plain", `quo"te`, `back\slash`, "ctl\x01\x1f", "ünïcödé", ""} {
		r := Result{State: StatePending, OrderID: s, Fingerprint: s, Location: s, ContentType: s, Status: 201, Body: []byte(`{"id":1}`)}
		gr, err := DecodeResult(r.Encode())
		if err != nil || gr.OrderID != s || gr.Location != s || gr.ContentType != s || gr.Status != 201 || string(gr.Body) != `{"id":1}` {
			t.Fatalf("result %q: %+v %v", s, gr, err)
		}
	}
}
