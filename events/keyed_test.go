package events_test

import (
	"encoding/base64"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

func TestKeyedOrderIDRoundTrip(t *testing.T) {
	t.Parallel()
	token, ok := events.KeyToken(idempotency.KeyHash("tenant", "key-1"))
	if !ok || len(token) != events.KeyTokenLen {
		t.Fatalf("KeyToken = %q %v", token, ok)
	}
	var ids []string
	for _, seq := range []uint64{1, 31, 32, 1 << 40, math.MaxUint64} {
		id := events.KeyedOrderID(seq, token)
		if len(id) != 37 || !strings.HasPrefix(id, events.OrderIDPrefix) {
			t.Fatalf("%d: id %q", seq, id)
		}
		got, tok, ok := events.ParseKeyedOrderID(id)
		if !ok || got != seq || tok != token {
			t.Fatalf("ParseKeyedOrderID(%q) = %d %q %v, want %d %q", id, got, tok, ok, seq, token)
		}
		if _, _, ok := events.ParseOrderID(id); ok {
			t.Fatalf("a keyed ID %q passes as an unkeyed one", id)
		}
		if got, ok := events.OrderSeq(id); !events.ValidOrderID(id) || !ok || got != seq {
			t.Fatalf("OrderSeq(%q) = %d %v, want %d", id, got, ok, seq)
		}
		ids = append(ids, id)
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatalf("keyed IDs do not sort by sequence: %v", ids)
	}
	unkeyed := events.OrderID(7, "Z4A8K2M9QX7RT")
	for _, bad := range []string{"", unkeyed, "ord_0000000000001" + strings.Repeat("a", 19), "ord_0000000000001" + strings.Repeat("a", 21),
		"ord_0000000000001" + strings.Repeat("a", 19) + ".", "ord_0000000000001" + strings.Repeat("a", 19) + "*",
		"ord_G000000000001" + strings.Repeat("a", 20), "ord_0000000000000" + strings.Repeat("a", 20) /* sequence 0 */, "xrd_0000000000001" + strings.Repeat("a", 20)} {
		if _, _, ok := events.ParseKeyedOrderID(bad); ok {
			t.Errorf("ParseKeyedOrderID(%q) ok", bad)
		}
	}
	for _, bad := range []string{"", "too-short", strings.Repeat("a", 19) + "." + strings.Repeat("a", 23),
		strings.Repeat("a", 19) + ">" + strings.Repeat("a", 23), strings.Repeat("a", 10) + " " + strings.Repeat("a", 32)} {
		if tok, ok := events.KeyToken(bad); ok {
			t.Errorf("KeyToken(%q) = %q, accepted", bad, tok)
		}
	}
}

func TestKeyedSubjects(t *testing.T) {
	t.Parallel()
	token, _ := events.KeyToken(idempotency.KeyHash("tenant", "key-1"))
	id := events.KeyedOrderID(42, token)
	subj := events.KeyedEventSubject(events.KindCreated, token, 42)
	seq := strings.TrimPrefix(events.OrderID(42, ""), events.OrderIDPrefix)
	if want := "orders.events.created." + token + "." + seq; subj != want {
		t.Fatalf("KeyedEventSubject = %q, want %q", subj, want)
	}
	if got := events.KeySubjects(token); got != "orders.events.*."+token+".*" {
		t.Fatalf("KeySubjects = %q", got)
	}
	unkeyed := events.OrderID(42, "Z4A8K2M9QX7RT")
	for id, want := range map[string]string{id: "orders.events.*." + token + "." + seq, unkeyed: "orders.events.*." + unkeyed} {
		if f, ok := events.OrderFilter(id); !ok || f != want {
			t.Fatalf("OrderFilter(%q) = %q %v, want %q", id, f, ok, want)
		}
	}
	for _, bad := range []string{"", ">", "ord_*", id + ".x", "orders.events.>"} {
		if f, ok := events.OrderFilter(bad); ok {
			t.Fatalf("OrderFilter(%q) = %q", bad, f)
		}
	}
	for s, want := range map[string]string{subj: id, events.EventSubject(events.KindRejected, unkeyed): unkeyed} {
		if got := events.OrderIDOfSubject(s); got != want {
			t.Fatalf("OrderIDOfSubject(%q) = %q, want %q", s, got, want)
		}
	}
	if tok, ok := events.KeyTokenOfSubject(subj); !ok || tok != token {
		t.Fatalf("KeyTokenOfSubject(%q) = %q %v", subj, tok, ok)
	}
	for _, bad := range []string{events.EventSubject(events.KindCreated, unkeyed), "orders.events.created." + token, "x.y.created." + token + ".1",
		"orders.events.created.short.1", "orders.events.created." + token + ".1.2"} {
		if tok, ok := events.KeyTokenOfSubject(bad); ok {
			t.Fatalf("KeyTokenOfSubject(%q) = %q", bad, tok)
		}
	}
	if got := events.EventSubject(events.KindCreated, id); got != subj {
		t.Fatalf("EventSubject of keyed ID %q = %q, want %q", id, got, subj)
	}
	// Every keyed subject is under the event stream's subjects and has five
	// tokens, none of them empty or a wildcard.
	if !strings.HasPrefix(subj, events.EventSubjectPrefix) || len(strings.Split(subj, ".")) != 5 || strings.ContainsAny(subj, "*> ") {
		t.Fatalf("subject %q", subj)
	}
}

func TestCommandOrderIDForms(t *testing.T) {
	t.Parallel()
	hash := idempotency.KeyHash("tenant", "key-1")
	token, _ := events.KeyToken(hash)
	classic := events.CreateOrder{Type: events.CreateOrderType, Nonce: "Z4A8K2M9QX7RT", KeyHash: hash}
	keyed := events.CreateOrder{Type: events.CreateOrderType, IDForm: events.IDFormKeyed, KeyHash: hash}
	for _, c := range []struct {
		cmd  events.CreateOrder
		want string
	}{
		{classic, events.OrderID(9, classic.Nonce)},
		{keyed, events.KeyedOrderID(9, token)},
	} {
		id, ok := c.cmd.OrderIDAt(9)
		if !ok || id != c.want || !c.cmd.HasOrderID(id) {
			t.Fatalf("%+v: OrderIDAt = %q %v, want %q", c.cmd, id, ok, c.want)
		}
	}
	other, _ := events.KeyToken(idempotency.KeyHash("tenant", "key-2"))
	if keyed.HasOrderID(events.KeyedOrderID(9, other)) || classic.HasOrderID(events.KeyedOrderID(9, token)) || keyed.HasOrderID(events.OrderID(9, classic.Nonce)) {
		t.Fatal("a command owns an order ID of another key or form")
	}
	// Commands from outside: each can make no ID, and owns none.
	for _, bad := range []events.CreateOrder{
		{IDForm: events.IDFormKeyed, Nonce: classic.Nonce, KeyHash: hash}, // keyed with a nonce
		{IDForm: events.IDFormKeyed, KeyHash: "short"},
		{IDForm: events.IDFormKeyed, KeyHash: "orders.>" + hash},
		{IDForm: "v3", KeyHash: hash, Nonce: classic.Nonce},
		{KeyHash: hash, Nonce: "bad"},
		{KeyHash: hash, Nonce: "Z4A8K2M9QX7.>"}, // the length of a nonce, not its alphabet
		{KeyHash: hash},
	} {
		if id, ok := bad.OrderIDAt(9); ok {
			t.Errorf("%+v: OrderIDAt = %q", bad, id)
		}
		if bad.HasOrderID(events.KeyedOrderID(9, token)) || bad.HasOrderID(events.OrderID(9, classic.Nonce)) {
			t.Errorf("%+v owns an order ID", bad)
		}
	}
}

// TestIsBase64URLTakesTheAlphabetOnly checks every byte against the
// alphabet of encoding/base64's URL encoding, alone and inside a token.
func TestIsBase64URLTakesTheAlphabetOnly(t *testing.T) {
	t.Parallel()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	if got := base64.RawURLEncoding.EncodeToString([]byte{0xfb, 0xff, 0xbf}); got != "-_-_" {
		t.Fatalf("the URL alphabet's last two are not '-' and '_': %q", got)
	}
	for c := 0; c < 256; c++ {
		want := strings.IndexByte(alphabet, byte(c)) >= 0
		s := string([]byte{byte(c)})
		if got := events.IsBase64URL(s); got != want {
			t.Errorf("IsBase64URL(%q) = %v, want %v", s, got, want)
		}
		if got := events.IsBase64URL("ab" + s + "Z9"); got != want {
			t.Errorf("IsBase64URL(%q) = %v, want %v", "ab"+s+"Z9", got, want)
		}
	}
	if !events.IsBase64URL("") || !events.IsBase64URL(alphabet) {
		t.Error("the empty string and the whole alphabet are base64url")
	}
}

func BenchmarkIsBase64URL(b *testing.B) {
	hash := idempotency.KeyHash("tenant", "key-1")
	b.SetBytes(int64(len(hash)))
	for b.Loop() {
		if !events.IsBase64URL(hash) {
			b.Fatal(hash)
		}
	}
}
