package jsonr_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonr"
	"github.com/orderly-dev/orderly/internal/jsonr/jsonrtest"
)

const command = `{"type":"orderly.order.create.v1","id_form":"keyed","tenant":"acme","key_hash":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","fingerprint":"fp","accepted_at":"2026-12-01T05:07:43.123456789Z","request":{"customer_id":"c-42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":1999},{"sku":"SKU-2","quantity":1,"unit_price":0}],"total":3998},"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`

// checkCreateOrder: what the one-pass reader takes, it decodes as go-json.
func checkCreateOrder(t *testing.T, data []byte) (ok bool) {
	t.Helper()
	return jsonrtest.Agrees(t, data, jsonr.CreateOrder)
}

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	if !checkCreateOrder(t, []byte(command)) {
		t.Fatal("a command as the API writes it is left to go-json")
	}
	for _, doc := range []string{
		`{"type":"x","nonce":"n","request":{"customer_id":"c","currency":"EUR","items":[]}}`,
		"{\"tenant\":\"é\" , \"request\" :{\"items\":[{}],\"total\":-0}}\n",
		`{"request":{"items":[{"quantity":-9223372036854775808}]}}`,
		`{}`,
	} {
		if !checkCreateOrder(t, []byte(doc)) {
			t.Errorf("%s left to go-json", doc)
		}
	}
	// Each of these is left to go-json, which decodes them its own way.
	for _, doc := range []string{
		`{"Type":"x"}`, // go-json matches names without case
		`{"type":"x","type":"y"}`,
		`{"type":null}`,
		`{"request":{"total":null}}`,
		`{"request":{"items":null}}`,
		`{"request":{"total":1.0}}`,
		`{"request":{"total":1e3}}`,
		`{"request":{"total":9223372036854775808}}`,
		`{"accepted_at":"2026-12-01"}`,
		`{"t\u0079pe":"x"}`,
		`{"extra":1}`,
		`{"tenant":"\ud800"}`,
		`{"tenant":"\u00e9"}`, // escapes are go-json's
		`{"request":{"items":[{"quantity":01}]}}`,
		`{"request":{"items":[{"quantity":-}]}}`,
		`{"request":{"items":[{},]}}`,
		`{"type":"x",}`,
		`{"request":{"items":[{"sku":"a","sku":"b"}]}}`,
		"{\"tenant\":\"\xff\"}",
		`{} {}`,
		"{}\x00",
		"{\"type\":\"x\"}\x00 ",
		`[]`,
		`{"type":"x"`,
	} {
		if _, ok := jsonr.CreateOrder([]byte(doc)); ok {
			t.Errorf("read %s, which it should leave to go-json", doc)
		}
	}
}

func FuzzCreateOrder(f *testing.F) {
	f.Add([]byte(command))
	f.Add([]byte(`{"tenant":"\u00e9\n","request":{"items":[{}],"total":-0}}`))
	f.Add([]byte("{\"tenant\":\"é\" , \"request\" :{\"items\":[{}],\"total\":-0}}\n"))
	f.Add([]byte(`{"accepted_at":"2026-12-01T05:07:43+01:00","request":{"items":[{"sku":"a\"b"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCreateOrder(t, data)
	})
}

func BenchmarkCreateOrder(b *testing.B) {
	data := []byte(command)
	b.Run("go-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var cmd events.CreateOrder
			if err := gojson.Unmarshal(data, &cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jsonr", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := jsonr.CreateOrder(data); !ok {
				b.Fatal("left to go-json")
			}
		}
	})
}

func TestTimeAsUnmarshalJSON(t *testing.T) {
	t.Parallel()
	d := jsonr.New([]byte(` "2026-12-01T05:07:43.5+02:00" `))
	got := d.Time()
	var want time.Time
	if err := want.UnmarshalJSON([]byte(`"2026-12-01T05:07:43.5+02:00"`)); err != nil || !d.End() || !got.Equal(want) {
		t.Fatalf("read %v, want %v", got, want)
	}
}

// FuzzCreateOrderFields: a command as go-json encodes it is read (unless
// its JSON has escapes, which are go-json's), and read as go-json reads it.
func FuzzCreateOrderFields(f *testing.F) {
	f.Add("acme", "c-42", "SKU-1", int64(2), int64(1999), int64(1764565663123456789), 3, true)
	f.Add("é", "<b>", "\xff", int64(-1), int64(0), int64(-62135596800000000), 0, false)
	f.Fuzz(func(t *testing.T, tenant, text, sku string, q, p, unixNano int64, n int, total bool) {
		items := make([]events.Item, uint(n)%8)
		for i := range items {
			items[i] = events.Item{SKU: sku, Quantity: q, UnitPrice: p}
		}
		cmd := events.CreateOrder{Type: events.CreateOrderType, Nonce: text, Tenant: tenant, KeyHash: text, Fingerprint: sku,
			AcceptedAt: time.Unix(0, unixNano).UTC(), TraceParent: text,
			Request: events.OrderRequest{CustomerID: text, Currency: sku, Items: items}}
		if total {
			cmd.Request.Total = &q
		}
		data, err := gojson.Marshal(cmd)
		if err != nil {
			return
		}
		if !checkCreateOrder(t, data) && !bytes.Contains(data, []byte(`\`)) && unixNano > -62135596800000000 {
			t.Fatalf("left %s to go-json", data)
		}
	})
}

// panicky panics when it is decoded, as go-json v0.10.5 did on some
// malformed input.
type panicky struct{}

func (*panicky) UnmarshalJSON([]byte) error { panic("read past the end") }

func TestUnmarshalReturnsAPanicAsAnError(t *testing.T) {
	t.Parallel()
	var v struct {
		P panicky `json:"p"`
	}
	if err := jsonr.Unmarshal([]byte(`{"p":1}`), &v); err == nil || !strings.Contains(err.Error(), "read past the end") {
		t.Fatalf("Unmarshal: %v", err)
	}
	var w struct {
		A int `json:"a"`
	}
	if err := jsonr.Unmarshal([]byte(`{"a":7}`), &w); err != nil || w.A != 7 {
		t.Fatalf("Unmarshal: %+v %v", w, err)
	}
}
