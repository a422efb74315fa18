package idempotency_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// reference is the fingerprint as defined: base64url SHA-256 of the order's
// encoding/json encoding. Stored records hold fingerprints made this way, so
// a retry after an upgrade must find the same one.
func reference(t testing.TB, req events.OrderRequest) string {
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func TestFingerprintMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	total, negative := int64(4990), int64(math.MinInt64)
	texts := []string{
		"c-42", "", "é", "😀", "a\"b", `a\b`, "<script>", "a<b", "a&b", "a>b", "\t", "\x00", "\x7f",
		"\u2028", "\u2029", "€", "\xff", "a\xe2", "\xe2\x80", "ok\xe2\x80\xa8", strings1k(),
	}
	for _, s := range texts {
		for _, req := range []events.OrderRequest{
			{CustomerID: s, Currency: "EUR", Items: []events.Item{{SKU: "x", Quantity: 1, UnitPrice: 0}}},
			{CustomerID: "c", Currency: s, Items: []events.Item{{SKU: s, Quantity: math.MaxInt64, UnitPrice: -1}}, Total: &total},
			{CustomerID: "c", Currency: "EUR", Items: []events.Item{{SKU: "a"}, {SKU: s, Quantity: -7}}, Total: &negative},
			{CustomerID: s, Currency: s},                         // items null
			{CustomerID: s, Currency: s, Items: []events.Item{}}, // items []
		} {
			if got, want := idempotency.Fingerprint(req), reference(t, req); got != want {
				t.Errorf("Fingerprint(%+v) = %s, encoding/json gives %s", req, got, want)
			}
		}
	}
}

func strings1k() string {
	b := make([]byte, 1000)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return string(b)
}

func FuzzFingerprint(f *testing.F) {
	f.Add("c-42", "EUR", "SKU-1", int64(2), int64(2495), int64(4990), true, 3)
	f.Add("<&>", "\u2028", "\xff", int64(-1), int64(math.MaxInt64), int64(math.MinInt64), false, 0)
	f.Fuzz(func(t *testing.T, customer, currency, sku string, q, p, total int64, withTotal bool, n int) {
		req := events.OrderRequest{CustomerID: customer, Currency: currency}
		if n = n % 40; n >= 0 {
			req.Items = make([]events.Item, n)
			for i := range req.Items {
				req.Items[i] = events.Item{SKU: sku[:i%(len(sku)+1)], Quantity: q + int64(i), UnitPrice: p}
			}
		}
		if withTotal {
			req.Total = &total
		}
		if got, want := idempotency.Fingerprint(req), reference(t, req); got != want {
			t.Fatalf("Fingerprint(%+v) = %s, encoding/json gives %s", req, got, want)
		}
	})
}

func TestKeyHashIsSHA256OfTenantZeroKey(t *testing.T) {
	t.Parallel()
	long := strings1k()
	for _, c := range [][2]string{{"default", "k-1"}, {"", ""}, {"t", long}, {long, "k"}, {"ab", "c\x00d"}} {
		h := sha256.New()
		h.Write([]byte(c[0]))
		h.Write([]byte{0})
		h.Write([]byte(c[1]))
		if got, want := idempotency.KeyHash(c[0], c[1]), base64.RawURLEncoding.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("KeyHash(%.20q, %.20q) = %s, want %s", c[0], c[1], got, want)
		}
	}
}

// createdView is the 201 body as encoding/json renders a created order's
// view: what stored responses of earlier versions hold, byte for byte.
func createdView(t testing.TB, e events.OrderCreated) string {
	created, total := e.CreatedAt.UTC(), e.Total
	b, err := json.Marshal(idempotency.OrderView{ID: e.OrderID, Status: idempotency.StatusCreated, CustomerID: e.CustomerID,
		Currency: e.Currency, Items: e.Items, Total: &total, AcceptedAt: e.AcceptedAt.UTC(), CreatedAt: &created})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCreatedViewMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 5, 7, 43, 123456000, time.UTC)
	for _, s := range []string{"c-42", "é", "<b>", "a&b", "\u2028", "\xff", "\"", "€"} {
		for _, e := range []events.OrderCreated{
			{OrderID: "ord_1", Tenant: "t", CustomerID: s, Currency: "EUR", Items: []events.Item{{SKU: s, Quantity: 2, UnitPrice: 5}}, Total: 10, AcceptedAt: at, CreatedAt: at.Add(time.Millisecond)},
			{OrderID: s, CustomerID: "c", Currency: s, Total: math.MinInt64, AcceptedAt: at.In(time.FixedZone("x", 7200)), CreatedAt: at},
			{OrderID: "o", CustomerID: "c", Currency: "EUR", Items: []events.Item{}, CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		} {
			if e.CreatedAt.Year() > 9999 {
				func() { // encoding/json refuses the year: so must the view
					defer func() { _ = recover() }()
					idempotency.CreatedOrder(e)
					t.Errorf("CreatedOrder rendered a year encoding/json refuses")
				}()
				continue
			}
			if got, want := string(idempotency.CreatedOrder(e).Body), createdView(t, e); got != want {
				t.Errorf("CreatedOrder body\n%s\nencoding/json\n%s", got, want)
			}
		}
	}
}

func FuzzCreatedView(f *testing.F) {
	f.Add("ord_1", "c-42", "EUR", "SKU-1", int64(2), int64(2495), int64(1764565663123456789), 3)
	f.Add("<", "\u2028", "\xff", "&", int64(-1), int64(math.MaxInt64), int64(-62135596800000000), 0)
	f.Fuzz(func(t *testing.T, id, customer, currency, sku string, q, p, nanos int64, n int) {
		e := events.OrderCreated{OrderID: id, CustomerID: customer, Currency: currency, Total: q * p,
			AcceptedAt: time.Unix(0, nanos).UTC(), CreatedAt: time.Unix(0, nanos/2)}
		if n = n % 40; n >= 0 {
			e.Items = make([]events.Item, n)
			for i := range e.Items {
				e.Items[i] = events.Item{SKU: sku[:i%(len(sku)+1)], Quantity: q, UnitPrice: p + int64(i)}
			}
		}
		if got, want := string(idempotency.CreatedOrder(e).Body), createdView(t, e); got != want {
			t.Fatalf("CreatedOrder body\n%s\nencoding/json\n%s", got, want)
		}
	})
}
