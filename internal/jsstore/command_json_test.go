package jsstore

import (
	"math"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonr/jsonrtest"
)

// checkCommand: the command's bytes are go-json's, whichever encoder made
// them (a processor of any version decodes them; a replay compares them).
func checkCommand(t *testing.T, cmd events.CreateOrder) {
	t.Helper()
	want, err := gojson.Marshal(cmd)
	if err != nil {
		if _, ok := appendCommand(nil, cmd); ok {
			t.Fatalf("appended a command go-json refuses (%v)", err)
		}
		return
	}
	got, err := encodeCommand(cmd)
	if err != nil || string(got) != string(want) {
		t.Fatalf("encodeCommand (%v)\n%s\ngo-json\n%s", err, got, want)
	}
}

func sampleCommand(text string, at time.Time, items []events.Item) events.CreateOrder {
	total := int64(7)
	return events.CreateOrder{
		Type: events.CreateOrderType, IDForm: events.IDFormKeyed, Tenant: text, KeyHash: "k", Fingerprint: text, AcceptedAt: at,
		Request: events.OrderRequest{CustomerID: text, Currency: "EUR", Items: items, Total: &total},
	}
}

func TestCommandMatchesGoJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 5, 7, 43, 123456789, time.UTC)
	for _, s := range []string{"c-42", "", "é", "<b>", "a&b", "\u2028", "\xff", "\"", "\\", "\n", "€", "😀"} {
		for _, items := range [][]events.Item{nil, {}, {{SKU: s, Quantity: 1, UnitPrice: math.MaxInt64}, {SKU: "x", Quantity: -1}}} {
			cmd := sampleCommand(s, at, items)
			checkCommand(t, cmd)
			cmd.Request.Total = nil
			cmd.IDForm, cmd.Nonce = "", s
			checkCommand(t, cmd)
			cmd.TraceParent = "00-" + s
			checkCommand(t, cmd)
			cmd.TraceState = s
			checkCommand(t, cmd)
		}
	}
	checkCommand(t, sampleCommand("t", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), nil))
	checkCommand(t, sampleCommand("t", at.In(time.FixedZone("x", -5*3600)), nil))
	checkCommand(t, sampleCommand("t", time.Time{}, nil))
	if _, ok := appendCommand(nil, sampleCommand("t-1", at, []events.Item{{SKU: "S", Quantity: 1}})); !ok {
		t.Fatal("a plain command left to go-json")
	}
}

func FuzzCommandJSON(f *testing.F) {
	f.Add("tenant", "nonce", "c-42", "00-abc-01", "SKU-1", int64(2), int64(2495), int64(1764565663123456789), 3, true)
	f.Add("<t>", "", "\xff", "", "\u2028", int64(-1), int64(math.MinInt64), int64(-62135596800000000), 0, false)
	f.Fuzz(func(t *testing.T, tenant, nonce, text, trace, sku string, q, p, unixNano int64, n int, total bool) {
		items := make([]events.Item, uint(n)%8)
		for i := range items {
			items[i] = events.Item{SKU: sku, Quantity: q, UnitPrice: p}
		}
		cmd := sampleCommand(text, time.Unix(0, unixNano).UTC(), items)
		cmd.Tenant, cmd.Nonce, cmd.TraceParent, cmd.TraceState = tenant, nonce, trace, sku
		if !total {
			cmd.Request.Total = nil
		}
		checkCommand(t, cmd)
	})
}

// BenchmarkEncodeCommand: the API encodes each command it publishes.
func BenchmarkEncodeCommand(b *testing.B) {
	items := make([]events.Item, 3)
	for i := range items {
		items[i] = events.Item{SKU: "SKU-100" + string(rune('0'+i)), Quantity: 2, UnitPrice: 1999}
	}
	cmd := sampleCommand("acme", time.Date(2026, 12, 1, 5, 7, 43, 123456789, time.UTC), items)
	cmd.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b.Run("go-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := gojson.Marshal(cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jsonw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeCommand(cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// checkPubAck: what the one-pass reader takes, it decodes as go-json.
func checkPubAck(t *testing.T, data []byte) (read bool) {
	t.Helper()
	return jsonrtest.Agrees(t, data, readPubAck)
}

func TestPubAckAsGoJSON(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"stream":"ORDER_COMMANDS","seq":42}`,
		`{"stream":"ORDER_COMMANDS","seq":42,"duplicate":true}`,
		`{"stream":"S", "domain":"hub" ,"seq":0,"duplicate":false,"val":"v"}`,
	} {
		if !checkPubAck(t, []byte(doc)) {
			t.Errorf("%s left to go-json", doc)
		}
	}
	for _, doc := range []string{
		`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`,
		`{"stream":"S","seq":-1}`,
		`{"stream":"S","seq":18446744073709551615}`,
		`{"stream":"S","seq":1,"duplicate":truex}`,
		`{"stream":"S","seq":1,"duplicate":1}`,
		`{"stream":"S","seq":1,"batch":"b","count":2}`,
	} {
		if _, ok := readPubAck([]byte(doc)); ok {
			t.Errorf("read %s, which it should leave to go-json", doc)
		}
	}
	if ack, err := decodePubAck([]byte(`{"error":{"code":503,"err_code":10077,"description":"full"},"stream":"S"}`)); err != nil || ack.Error == nil || ack.Error.ErrorCode != 10077 {
		t.Fatalf("an error ack decoded as %#v (%v)", ack, err)
	}
}

func FuzzPubAck(f *testing.F) {
	f.Add([]byte(`{"stream":"ORDER_COMMANDS","seq":42,"duplicate":true}`))
	f.Add([]byte(`{"stream":"S", "domain":"hub" ,"seq":0,"duplicate":false,"val":"v"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPubAck(t, data)
	})
}
