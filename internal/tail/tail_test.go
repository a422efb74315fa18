package tail_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/tail"
)

func TestTail(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	js := inst.JetStream(t)
	ctx := context.Background()

	var empty bytes.Buffer
	if n, err := tail.Tail(ctx, js, tail.Options{}, &empty); err != nil || n != 0 || empty.Len() != 0 {
		t.Fatalf("empty stream: %d %v %q", n, err, empty.String())
	}
	for i, body := range [][]byte{orderlytest.Order("c-1"), orderlytest.Order("c-2"),
		[]byte(`{"customer_id":"c-3","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}],"total":5}`)} {
		if r := inst.PostOrder(t, "tail-"+string(rune('a'+i)), body); r.Status != http.StatusCreated && r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("setup: %d", r.Status)
		}
	}
	// An answer precedes its event by a moment (ADR 0009).
	orderlytest.Eventually(t, 10*time.Second, "the three events", func() bool { return len(orderlytest.Events(t, js)) == 3 })

	cases := []struct {
		name  string
		opts  tail.Options
		lines int
		want  string
	}{
		{"all", tail.Options{}, 3, "customer=c-2 total=49.90 EUR"},
		{"created", tail.Options{Kind: events.KindCreated}, 2, "created"},
		{"rejected", tail.Options{Kind: events.KindRejected}, 1, "reason=total_mismatch"},
		{"json", tail.Options{JSON: true}, 3, `"specversion":"1.0"`},
		{"since", tail.Options{Since: time.Hour}, 3, "created"},
	}
	for _, tc := range cases {
		var out bytes.Buffer
		n, err := tail.Tail(ctx, js, tc.opts, &out)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if err != nil || n != tc.lines || len(lines) != tc.lines || !strings.Contains(out.String(), tc.want) {
			t.Fatalf("%s: %d lines, %v:\n%s", tc.name, n, err, out.String())
		}
	}

	// --follow prints new events as they come, until cancelled.
	fctx, cancel := context.WithCancel(ctx)
	var out orderlytest.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := tail.Tail(fctx, js, tail.Options{Follow: true, Kind: events.KindCreated}, &out)
		done <- err
	}()
	inst.PostOrder(t, "tail-new", orderlytest.Order("c-new"))
	orderlytest.Eventually(t, 10*time.Second, "the new event in the follow output", func() bool {
		return strings.Contains(out.String(), "customer=c-new")
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not stop")
	}
	if got := strings.Count(out.String(), "\n"); got != 3 {
		t.Fatalf("follow printed %d lines, want 3 (2 created before, 1 new):\n%s", got, out.String())
	}
}

// TestTailPrintsHostileEventsSafely: events are written by other processes;
// one whose fields hold terminal escapes and direction overrides (here
// published as the operator), or that is not even JSON, is printed with
// those characters escaped, in both forms, and a stored JSON event stays
// valid JSON on one line, an indented one too.
func TestTailPrintsHostileEventsSafely(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	js := inst.JetStream(t)
	ctx := context.Background()
	subject := events.EventSubject(events.KindCreated, "ord_0000000000001WWZAD2XPDAXP2")
	hostile := `{"specversion":"1.0","id":"ord_0000000000001WWZAD2XPDAXP2.created","source":"orderly","type":"orderly.order.created.v1",` +
		`"subject":"ord_0000000000001WWZAD2XPDAXP2","time":"2026-12-03T10:00:00Z","datacontenttype":"application/json",` +
		`"data":{"order_id":"ord_0000000000001WWZAD2XPDAXP2","tenant":"t\u202eevil","customer_id":"c\u001b]0;pwned\u0007\u001b[2J","currency":"EUR","items":[],"total":100}}`
	pretty := "{\n  \"type\": \"orderly.order.created.v1\",\n  \"subject\": \"s\\u001b[2J\"\n}"
	for _, data := range []string{hostile, "not json \x1b[31m\x9b\xff", pretty} {
		if _, err := js.Publish(ctx, subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	for _, asJSON := range []bool{false, true} {
		var out bytes.Buffer
		if n, err := tail.Tail(ctx, js, tail.Options{JSON: asJSON}, &out); err != nil || n != 3 {
			t.Fatalf("json %v: %d events, %v", asJSON, n, err)
		}
		for _, c := range []string{"\x1b", "\x07", "\u202e", "\x9b", "\xff"} {
			if strings.Contains(out.String(), c) {
				t.Errorf("json %v: the output holds %q:\n%q", asJSON, c, out.String())
			}
		}
		want := `customer=c\u001b]0;pwned\u0007\u001b[2J`
		if asJSON {
			want = hostile
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines, want one per event:\n%s", len(lines), out.String())
			}
			for _, i := range []int{0, 2} { // the two stored as valid JSON, the second indented
				if !json.Valid([]byte(lines[i])) {
					t.Errorf("stored event %d is no longer valid JSON: %s", i+1, lines[i])
				}
			}
			if want := `{"type":"orderly.order.created.v1","subject":"s\u001b[2J"}`; lines[2] != want {
				t.Errorf("the indented event printed as %s, want %s", lines[2], want)
			}
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("json %v: %q not in\n%s", asJSON, want, out.String())
		}
	}
}
