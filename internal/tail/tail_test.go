package tail_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/tail"
)

func TestTail(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			testTail(t, m)
		})
	}
}

func testTail(t *testing.T, m mode) {
	inst := orderlytest.Start(t, orderlytest.Config(t))
	r := m.reader(t, inst)
	js := inst.JetStream(t)
	ctx := context.Background()

	var empty bytes.Buffer
	if n, err := tail.Tail(ctx, r, m.opts(tail.Options{}), &empty); err != nil || n != 0 || empty.Len() != 0 {
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
		n, err := tail.Tail(ctx, r, m.opts(tc.opts), &out)
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
		_, err := tail.Tail(fctx, r, m.opts(tail.Options{Follow: true, Kind: events.KindCreated}), &out)
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

	// NewOnly (tail -n 0): nothing stored; with Follow, only what comes after.
	var none bytes.Buffer
	if n, err := tail.Tail(ctx, r, m.opts(tail.Options{NewOnly: true}), &none); err != nil || n != 0 || none.Len() != 0 {
		t.Fatalf("new only, no follow: %d %v %q", n, err, none.String())
	}
	if _, err := tail.Tail(ctx, r, m.opts(tail.Options{NewOnly: true, Follow: true, Since: time.Hour}), &none); err == nil {
		t.Fatal("new only with since: no error")
	}
	nctx, ncancel := context.WithCancel(ctx)
	var fresh orderlytest.Buffer
	ndone := make(chan error, 1)
	go func() {
		_, err := tail.Tail(nctx, r, m.opts(tail.Options{NewOnly: true, Follow: true}), &fresh)
		ndone <- err
	}()
	// The consumer may start after the post: post until one shows.
	orderlytest.Eventually(t, 10*time.Second, "a new event in the new-only output", func() bool {
		inst.PostOrder(t, fmt.Sprintf("tail-fresh-%d", time.Now().UnixNano()), orderlytest.Order("c-fresh"))
		time.Sleep(100 * time.Millisecond)
		return strings.Contains(fresh.String(), "customer=c-fresh")
	})
	ncancel()
	<-ndone
	if strings.Contains(fresh.String(), "customer=c-new") || strings.Contains(fresh.String(), "customer=c-1") {
		t.Fatalf("new only printed events stored before it started:\n%s", fresh.String())
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

// mode is a way tail reads: through an ordered consumer, as the operator;
// or by sequence, as the events user, who may not create consumers.
type mode struct {
	name       string
	bySequence bool
}

var modes = []mode{{"consumer", false}, {"by sequence", true}}

// reader is the connection the mode's tail reads with.
func (m mode) reader(t *testing.T, inst *orderlytest.Instance) jetstream.JetStream {
	t.Helper()
	if !m.bySequence {
		return inst.JetStream(t)
	}
	js, err := jsstore.DialJetStream(inst.NATSURL(), jsstore.Credentials{
		NkeyFile: inst.Creds.SeedPath(natsauth.Events), InboxPrefix: natsauth.InboxPrefix(natsauth.Events)}, "tail-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(js.Conn().Close)
	return js
}

// leftNothing checks that the tails read with r left nothing on the server:
// through a consumer, ORDER_EVENTS has no consumer of a tail's name (tail
// deleted its own; a count of all consumers once read 2 before and 1 after a
// tail, under load: the instance's own feeds come and go); by sequence, the
// events user was refused nothing (it may not create a consumer, so an
// attempt would be a permissions violation).
func (m mode) leftNothing(t *testing.T, r, operator jetstream.JetStream) {
	t.Helper()
	if m.bySequence {
		if err := r.Conn().LastError(); err != nil {
			t.Errorf("the events user's tail met %v", err)
		}
		return
	}
	if left := tailConsumers(t, operator); len(left) > 0 {
		t.Errorf("ORDER_EVENTS still has the tail's consumers %v", left)
	}
}

// opts are o for the mode.
func (m mode) opts(o tail.Options) tail.Options {
	o.BySequence = m.bySequence
	return o
}

// publishEvents stores count events of kind directly, with subjects e-<from>
// onwards, so that their order is visible in the summaries.
func publishEvents(t *testing.T, js jetstream.JetStream, from, count int, kind events.Kind) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := from; i < from+count; i++ {
		id := fmt.Sprintf("ord_%026d", i)
		data := fmt.Sprintf(`{"type":"orderly.order.%s.v1","subject":"e-%05d","time":"2026-12-03T10:00:00Z"}`, kind, i)
		if _, err := js.PublishAsync(events.EventSubject(kind, id), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("events not stored")
	}
}

// subjects are the e-<n> of each printed summary line, in order.
func subjects(out string) []string {
	var s []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			s = append(s, f[len(f)-1])
		}
	}
	return s
}

// tailConsumers are the consumers of ORDER_EVENTS that a tail made.
func tailConsumers(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	s, err := js.Stream(context.Background(), events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	list := s.ConsumerNames(context.Background())
	for name := range list.Name() {
		if strings.HasPrefix(name, tail.ConsumerPrefix) {
			names = append(names, name)
		}
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// writeHook runs hook before its first write.
type writeHook struct {
	bytes.Buffer
	hook func()
}

func (w *writeHook) Write(p []byte) (int, error) {
	if h := w.hook; h != nil {
		w.hook = nil
		h()
	}
	return w.Buffer.Write(p)
}

// TestTailStopsAtTheEventsStoredWhenItStarted: without --follow, tail prints
// the events stored when it started and returns, also while new ones keep
// coming (here 300 stored while it prints the first), and leaves no consumer
// behind on the server.
func TestTailStopsAtTheEventsStoredWhenItStarted(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			testTailStopsAtTheEventsStoredWhenItStarted(t, m)
		})
	}
}

func testTailStopsAtTheEventsStoredWhenItStarted(t *testing.T, m mode) {
	inst := orderlytest.Start(t, orderlytest.Config(t))
	r := m.reader(t, inst)
	js := inst.JetStream(t)
	publishEvents(t, js, 0, 1200, events.KindCreated)

	w := &writeHook{hook: func() { publishEvents(t, js, 1200, 300, events.KindCreated) }}
	n, err := tail.Tail(context.Background(), r, m.opts(tail.Options{}), w)
	got := subjects(w.String())
	if err != nil || n != 1200 || len(got) != 1200 || got[0] != "e-00000" || got[1199] != "e-01199" {
		t.Fatalf("printed %d events (%d lines, %v), want the 1,200 stored when it started; the last: %v",
			n, len(got), err, got[max(0, len(got)-2):])
	}
	m.leftNothing(t, r, js)
}

// TestTailEndsWhenTheCountedEventsAreGone: events counted at the start that
// expire before they are delivered are not waited for: without --follow
// the tail returns once nothing it may print is left.
func TestTailEndsWhenTheCountedEventsAreGone(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			testTailEndsWhenTheCountedEventsAreGone(t, m)
		})
	}
}

func testTailEndsWhenTheCountedEventsAreGone(t *testing.T, m mode) {
	cfg := orderlytest.Config(t)
	cfg.Topology.DedupWindow, cfg.Topology.ResultTTL, cfg.Topology.EventRetention = 200*time.Millisecond, time.Second, time.Second
	inst := orderlytest.Start(t, cfg)
	r := m.reader(t, inst)
	js := inst.JetStream(t)
	publishEvents(t, js, 0, 3000, events.KindCreated)
	// At the first line, wait until every stored event has expired; what
	// the client holds already is still printed.
	w := &writeHook{hook: func() {
		orderlytest.Eventually(t, 10*time.Second, "the events to expire", func() bool {
			return len(orderlytest.Events(t, js)) == 0
		})
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := tail.Tail(ctx, r, m.opts(tail.Options{}), w)
	if err != nil || n == 0 || n >= 3000 {
		t.Fatalf("printed %d of the 3,000 counted events, %v; want those delivered before they expired, then the end", n, err)
	}
}

// TestTailLast: --last N prints the last N matching events, of a kind too,
// where they are scattered over a larger stream; with --follow the new events
// after them. In both modes: through a consumer (the operator) and by
// sequence (the events user).
func TestTailLast(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			testTailLast(t, m)
		})
	}
}

func testTailLast(t *testing.T, m mode) {
	inst := orderlytest.Start(t, orderlytest.Config(t))
	r := m.reader(t, inst)
	js := inst.JetStream(t)
	operator := js // publishes the events tail reads
	ctx := context.Background()

	// e-00000..e-00029: every third rejected (e-00002, e-00005, ... e-00029);
	// then 400 created.
	for i := range 30 {
		kind := events.KindCreated
		if i%3 == 2 {
			kind = events.KindRejected
		}
		publishEvents(t, operator, i, 1, kind)
	}
	run := func(opts tail.Options, want ...string) {
		t.Helper()
		var out bytes.Buffer
		n, err := tail.Tail(ctx, r, m.opts(opts), &out)
		if got := subjects(out.String()); err != nil || n != len(want) || !slices.Equal(got, want) {
			t.Fatalf("%+v: %d events, %v: %v, want %v", m.opts(opts), n, err, got, want)
		}
	}
	run(tail.Options{Last: 3}, "e-00027", "e-00028", "e-00029")
	run(tail.Options{Last: 4, Kind: events.KindRejected}, "e-00020", "e-00023", "e-00026", "e-00029")
	run(tail.Options{Last: 1, Kind: events.KindCreated}, "e-00028")

	publishEvents(t, operator, 30, 400, events.KindCreated)
	run(tail.Options{Last: 2, Kind: events.KindRejected}, "e-00026", "e-00029")
	run(tail.Options{Last: 2}, "e-00428", "e-00429")
	var all []string
	for i := range 430 {
		all = append(all, fmt.Sprintf("e-%05d", i))
	}
	run(tail.Options{Last: 1000}, all...)
	var rejected []string
	for i := 2; i < 30; i += 3 {
		rejected = append(rejected, fmt.Sprintf("e-%05d", i))
	}
	run(tail.Options{Last: 1000, Kind: events.KindRejected}, rejected...)
	m.leftNothing(t, r, operator)

	// Since: the events stored in its last DURATION only (stored times are
	// the server's).
	time.Sleep(1500 * time.Millisecond)
	publishEvents(t, operator, 430, 3, events.KindCreated)
	run(tail.Options{Since: time.Second}, "e-00430", "e-00431", "e-00432")
	run(tail.Options{Since: time.Second, Kind: events.KindRejected})
	publishEvents(t, operator, 433, 1, events.KindRejected)
	run(tail.Options{Since: time.Second, Kind: events.KindRejected}, "e-00433")

	for _, bad := range []tail.Options{{Last: -1}, {Last: 2, Since: time.Hour}} {
		if _, err := tail.Tail(ctx, r, m.opts(bad), io.Discard); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out orderlytest.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := tail.Tail(fctx, r, m.opts(tail.Options{Last: 2, Kind: events.KindRejected, Follow: true}), &out)
		done <- err
	}()
	orderlytest.Eventually(t, 10*time.Second, "the last two", func() bool { return len(subjects(out.String())) == 2 })
	publishEvents(t, operator, 434, 1, events.KindCreated)
	publishEvents(t, operator, 435, 1, events.KindRejected)
	orderlytest.Eventually(t, 10*time.Second, "the new rejected event", func() bool { return len(subjects(out.String())) == 3 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("follow ended with %v", err)
	}
	if got, want := subjects(out.String()), []string{"e-00029", "e-00433", "e-00435"}; !slices.Equal(got, want) {
		t.Errorf("follow printed %v, want %v", got, want)
	}
}

// TestSummaryOfTotals: a total in minor units prints with the decimals of
// its currency's minor unit, also at the limits of what a stored event may
// hold (4990 yen printed as "49.90 JPY" before).
func TestSummaryOfTotals(t *testing.T) {
	for _, tc := range []struct {
		total    int64
		currency string
		want     string
	}{
		{4990, "EUR", "total=49.90 EUR"}, {5, "EUR", "total=0.05 EUR"}, {0, "EUR", "total=0.00 EUR"},
		{-5, "EUR", "total=-0.05 EUR"}, {-4990, "EUR", "total=-49.90 EUR"},
		{math.MaxInt64, "EUR", "total=92233720368547758.07 EUR"}, {math.MinInt64, "EUR", "total=-92233720368547758.08 EUR"},
		{4990, "JPY", "total=4990 JPY"}, {4990, "KWD", "total=4.990 KWD"}, {4990, "ABC", "total=4990 minor units of ABC"},
	} {
		data := fmt.Sprintf(`{"type":"orderly.order.created.v1","time":"2026-12-03T10:00:00Z","data":{"order_id":"ord_1","currency":%q,"total":%d}}`, tc.currency, tc.total)
		if got := tail.Summary([]byte(data)); !strings.Contains(got, " "+tc.want+" ") {
			t.Errorf("total %d %s: %s, want %q", tc.total, tc.currency, got, tc.want)
		}
	}
}

// TestTailAsTheEventsUserIsRefused: the events user may not create consumers
// (docs/security.md), so tail, which reads with an ordered consumer it
// creates, fails, and the error names the permissions violation.
func TestTailAsTheEventsUserIsRefused(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	js, err := jsstore.DialJetStream(inst.NATSURL(), jsstore.Credentials{
		NkeyFile: inst.Creds.SeedPath(natsauth.Events), InboxPrefix: natsauth.InboxPrefix(natsauth.Events)}, "tail-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(js.Conn().Close)
	// As the CLI does: the violation ends the command at once, rather than
	// the refused request's timeout.
	ctx, cancel := context.WithTimeoutCause(context.Background(), 5*time.Second, errors.New("no violation reported in 5 s"))
	defer cancel()
	ctx, denied := context.WithCancelCause(ctx)
	defer denied(nil)
	js.Conn().SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			denied(err)
		}
	})
	var out bytes.Buffer
	_, err = tail.Tail(ctx, js, tail.Options{}, &out)
	if err == nil {
		err = context.Cause(ctx)
	}
	if err = jsstore.WithDenied(err, js.Conn()); err == nil || !strings.Contains(err.Error(), "CONSUMER.CREATE.ORDER_EVENTS") {
		t.Fatalf("tail as the events user: %v, want the refused consumer creation named", err)
	}
}

// TestFollowEndsAtOnceInAnOutage: events tail --follow with its consumer's
// node and one more of three down, so that no meta leader can make the
// consumer again, ends within a moment of its interrupt. nats.go's ordered
// consumer makes it again under a lock that stopping the iterator waits
// for, pausing up to 10 s between attempts (docs/nats-facts.md, fact 17).
// A tail by sequence (the events user) ends as soon: its gets of a
// replicated stream go to the leader (no direct gets), and it asks again
// while there is none. Before the outage, it reads the stored events that
// way.
func TestFollowEndsAtOnceInAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("stops two nodes of a cluster; run without -short")
	}
	t.Parallel()
	cluster := orderlytest.Cluster(t, 3)
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	js := cluster.Operator("tail")
	eventsUser, err := jsstore.DialJetStream(cluster.URLs(), jsstore.Credentials{
		NkeyFile: cluster.Creds.SeedPath(natsauth.Events), InboxPrefix: natsauth.InboxPrefix(natsauth.Events)}, "tail-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eventsUser.Conn().Close)
	publishEvents(t, js, 0, 5, events.KindCreated)
	var stored bytes.Buffer
	if n, err := tail.Tail(context.Background(), eventsUser, tail.Options{Last: 2, BySequence: true}, &stored); err != nil || n != 2 ||
		!slices.Equal(subjects(stored.String()), []string{"e-00003", "e-00004"}) {
		t.Fatalf("the last two by sequence on R3: %d, %v:\n%s", n, err, stored.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readers := []struct {
		js   jetstream.JetStream
		opts tail.Options
	}{{js, tail.Options{Follow: true, NewOnly: true}}, {eventsUser, tail.Options{Follow: true, NewOnly: true, BySequence: true}}}
	outs := make([]orderlytest.Buffer, len(readers))
	done := make(chan error, len(readers))
	for i, r := range readers {
		go func() {
			_, err := tail.Tail(ctx, r.js, r.opts, &outs[i])
			done <- err
		}()
	}
	cluster.StopFeedAndQuorum(t, js, events.EventStream)
	// nats.go notices at once that the connection moved, and is then
	// between attempts whose pauses grow to 10 s.
	time.Sleep(5 * time.Second)
	began := time.Now()
	cancel()
	for range readers {
		select {
		case err := <-done:
			took := time.Since(began)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("tail ended with %v, want context.Canceled", err)
			}
			if took > 2*time.Second {
				t.Fatalf("tail ended %s after its context, want within 2 s", took.Round(time.Millisecond))
			}
		case <-time.After(30 * time.Second):
			t.Fatal("tail still runs 30 s after its context ended")
		}
	}
	for i := range outs {
		if outs[i].String() != "" {
			t.Errorf("tail %+v printed %q, with no new event", readers[i].opts, outs[i].String())
		}
	}
}
