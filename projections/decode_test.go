package projections

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonr/jsonrtest"
	"github.com/orderly-dev/orderly/processor"
)

// checkDecodeEvent: what the one-pass reader takes, it decodes as go-json,
// and decodeEvent returns it.
func checkDecodeEvent(t *testing.T, data []byte) (read bool) {
	t.Helper()
	if !jsonrtest.Agrees(t, data, readEvent) {
		return false
	}
	want, _ := readEvent(data)
	if dec, err := decodeEvent(data); err != nil || !reflect.DeepEqual(dec, want) {
		t.Fatalf("decodeEvent %#v (%v)", dec, err)
	}
	return true
}

func TestDecodeEventAsGoJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 5, 7, 43, 123456789, time.UTC)
	total := int64(3)
	cmd := events.CreateOrder{Type: events.CreateOrderType, IDForm: events.IDFormKeyed, Tenant: "t", KeyHash: "AYgtf0Exck_pdTHqc6a4AYgtf0Exck_pdTHqc6a4abc",
		Fingerprint: "fp", AcceptedAt: at.Add(-time.Second), TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Request: events.OrderRequest{CustomerID: "c-42", Currency: "EUR", Items: []events.Item{{SKU: "a", Quantity: 1, UnitPrice: 5}}}}
	created := processor.Decide(cmd, "ord_1", at).Event
	cmd.Request.Total = &total
	rejected := processor.Decide(cmd, "ord_2", at).Event
	for _, ev := range [][]byte{created, rejected, keyedCreated(at)} {
		if !checkDecodeEvent(t, ev) {
			t.Errorf("left to go-json: %s", ev)
		}
	}
	for _, doc := range []string{`{"Type":"x"}`, `{"data":{"total":1.5}}`, `{"data":{"request":{"total":null}}}`, `{"time":null}`, `{"data":{"x":1}}`} {
		if _, ok := readEvent([]byte(doc)); ok {
			t.Errorf("read %s, which it should leave to go-json", doc)
		}
	}
}

func FuzzDecodeEvent(f *testing.F) {
	at := time.Unix(1700000000, 0)
	f.Add(created(at))
	f.Add(keyedCreated(at))
	f.Add([]byte(`{"type":"orderly.order.rejected.v1","data":{"reason":"total_mismatch","request":{"items":[],"total":-1},"rejected_at":"2026-12-01T05:07:43Z"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeEvent(t, data)
		// The same document with its strings changed where a fuzzer rarely
		// gets by chance: every ASCII letter run shifted.
		checkDecodeEvent(t, bytes.ReplaceAll(data, []byte("a"), []byte("é")))
	})
}
