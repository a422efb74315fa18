package jsstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

func js(t testing.TB) jetstream.JetStream {
	return orderlytest.JetStream(t, natsserver.Fsync{Interval: time.Second})
}

// stores opens Results and Events on a new server, writing through
// FastPublish as orderly does.
func stores(t *testing.T) (jetstream.JetStream, *jsstore.Results, *jsstore.Events) {
	t.Helper()
	ctx := context.Background()
	j := js(t)
	pub := jsstore.FastPublish(j, 5*time.Second)
	r, err := jsstore.OpenResults(ctx, j, pub)
	if err != nil {
		t.Fatal(err)
	}
	e, err := jsstore.OpenEvents(ctx, j, pub)
	if err != nil {
		t.Fatal(err)
	}
	return j, r, e
}

func command(key string) events.CreateOrder {
	return events.CreateOrder{Type: events.CreateOrderType, Nonce: events.NewNonce(), Tenant: "t",
		KeyHash: idempotency.KeyHash("t", key), Fingerprint: "fp", AcceptedAt: time.Now(),
		Request: events.OrderRequest{CustomerID: "c", Currency: "EUR", Items: []events.Item{{SKU: "a", Quantity: 1, UnitPrice: 1}}}}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := js(t)
	c, err := jsstore.OpenCommands(ctx, j, j)
	if err != nil {
		t.Fatal(err)
	}
	cmd := command("k1")
	seq, dup, err := c.Publish(ctx, cmd)
	if err != nil || dup || seq == 0 {
		t.Fatalf("publish: %d %v %v", seq, dup, err)
	}
	retry := command("k1") // another nonce, same key: the broker's window drops it
	if seq2, dup, err := c.Publish(ctx, retry); err != nil || !dup || seq2 != seq {
		t.Fatalf("retry: %d %v %v, want a duplicate of %d", seq2, dup, err, seq)
	}
	got, err := c.Command(ctx, seq)
	if err != nil || got.Nonce != cmd.Nonce || got.KeyHash != cmd.KeyHash {
		t.Fatalf("command at %d: %+v %v", seq, got, err)
	}
	if _, err := c.Command(ctx, seq+100); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("command past the end: %v", err)
	}
	if found, ok, err := c.FindCommand(ctx, events.OrderID(seq, cmd.Nonce)); err != nil || !ok || found.Nonce != cmd.Nonce {
		t.Fatalf("find: %+v %v %v", found, ok, err)
	}
	for _, id := range []string{events.OrderID(seq, retry.Nonce), events.OrderID(seq+100, cmd.Nonce), "ord_>", "junk"} {
		if _, ok, err := c.FindCommand(ctx, id); ok || err != nil {
			t.Fatalf("find %s: %v %v, want not found", id, ok, err)
		}
	}
}

func TestResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := js(t)
	r, err := jsstore.OpenResults(ctx, j, j)
	if err != nil {
		t.Fatal(err)
	}
	if r.TTL() != jsstore.DefaultTopology().ResultTTL {
		t.Fatalf("TTL %s", r.TTL())
	}
	var updates = make(chan idempotency.Record, 10)
	stop, live, err := r.Watch(ctx, func(_ string, rec idempotency.Record) { updates <- rec }, func(string, error) {})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := live(); err != nil {
		t.Fatalf("a fresh feed is not live: %v", err)
	}
	key := idempotency.KeyHash("t", "k")
	if _, ok, err := r.Get(ctx, key); ok || err != nil {
		t.Fatalf("get before: %v %v", ok, err)
	}
	mine := idempotency.Pending(oid(1), "fp")
	if _, won, err := r.Claim(ctx, key, mine); !won || err != nil {
		t.Fatalf("first claim: %v %v", won, err)
	}
	holder, won, err := r.Claim(ctx, key, idempotency.Pending(oid(2), "fp2"))
	if won || err != nil || holder.OrderID != oid(1) {
		t.Fatalf("second claim: %+v %v %v", holder, won, err)
	}
	done := idempotency.Record{State: idempotency.StateCompleted, OrderID: oid(1), Fingerprint: "fp", Status: 201, Body: []byte("{}")}
	if err := r.Save(ctx, key, done); err != nil {
		t.Fatal(err)
	}
	got, ok, err := r.Get(ctx, key)
	if !ok || err != nil || !got.Completed() || got.Stored.IsZero() {
		t.Fatalf("get after save: %+v %v %v", got, ok, err)
	}
	// The watch delivers the key's latest record; the claim before it only if
	// it was delivered before the save replaced it (one record per key).
	for seen := []idempotency.State{}; ; {
		select {
		case rec := <-updates:
			seen = append(seen, rec.State)
		case <-time.After(5 * time.Second):
			t.Fatalf("watch delivered %v, not the completed record", seen)
		}
		if n := len(seen); seen[n-1] == idempotency.StateCompleted {
			if n > 2 || n == 2 && seen[0] != idempotency.StatePending {
				t.Fatalf("watch delivered %v", seen)
			}
			break
		}
	}
	// A deleted key is claimed again atomically.
	if err := r.Purge(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, won, err := r.Claim(ctx, key, idempotency.Pending(oid(3), "fp")); !won || err != nil {
		t.Fatalf("claim after purge: %v %v", won, err)
	}
	// Save writes to the bucket's subject itself: what is not a key hash is
	// refused ("a.>" was stored under a wildcard subject).
	for _, bad := range []string{"a.>", "*", "", "a b", key[:42] + "."} {
		if err := r.Save(ctx, bad, done); !errors.Is(err, jetstream.ErrInvalidKey) {
			t.Fatalf("save under %q: %v", bad, err)
		}
	}
	n := 0
	if err := r.Snapshot(ctx, func(string, []byte) { n++ }); err != nil || n != 1 {
		t.Fatalf("snapshot: %d %v", n, err)
	}
}

// TestSingleWritesSendAgainWhatGoesUnanswered: a write of one message, the
// projector's Save of a key's record and the processor's Claim and Append
// of a lone command, unanswered (its stream gone, a subscriber that never
// answers on its subjects: a stream leader that hangs, nats-facts 23), is
// sent again after a second and stored once the stream is back (300 ms in).
// On the code before, each waited for its context's end (5 s) and failed:
// only batches of several commands were sent again.
func TestSingleWritesSendAgainWhatGoesUnanswered(t *testing.T) {
	t.Parallel()
	key := idempotency.KeyHash("t", "k")
	rec := idempotency.Record{State: idempotency.StateCompleted, OrderID: oid(1), Fingerprint: "fp", Status: 201, Body: []byte("{}")}
	recordStored := func(ctx context.Context, r *jsstore.Results, _ *jsstore.Events) bool {
		got, ok, err := r.Get(ctx, key)
		return err == nil && ok && got.OrderID == rec.OrderID
	}
	for _, c := range []struct {
		name, stream, subjects string
		write                  func(context.Context, *jsstore.Results, *jsstore.Events) error
		stored                 func(context.Context, *jsstore.Results, *jsstore.Events) bool
	}{
		{"Save", jsstore.ResultsStream, "$KV." + events.ResultsBucket + ".>",
			func(ctx context.Context, r *jsstore.Results, _ *jsstore.Events) error { return r.Save(ctx, key, rec) },
			recordStored},
		{"Claim", jsstore.ResultsStream, "$KV." + events.ResultsBucket + ".>",
			func(ctx context.Context, r *jsstore.Results, _ *jsstore.Events) error {
				if _, won, err := r.Claim(ctx, key, rec); err != nil || !won {
					return fmt.Errorf("won %v: %w", won, err)
				}
				return nil
			},
			recordStored},
		{"Append", events.EventStream, events.EventSubjectPrefix + ">",
			func(ctx context.Context, _ *jsstore.Results, e *jsstore.Events) error {
				if stored, err := e.Append(ctx, events.KindCreated, oid(1), []byte(`{}`)); err != nil || !stored {
					return fmt.Errorf("stored %v: %w", stored, err)
				}
				return nil
			},
			func(ctx context.Context, _ *jsstore.Results, e *jsstore.Events) bool {
				data, ok, err := e.Event(ctx, oid(1))
				return err == nil && ok && string(data) == `{}`
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			j, r, e := stores(t)
			if err := j.DeleteStream(ctx, c.stream); err != nil {
				t.Fatal(err)
			}
			silent, err := j.Conn().Subscribe(c.subjects, func(*nats.Msg) {})
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Unsubscribe() //nolint:errcheck // the test's connection closes anyway
			type outcome struct {
				err  error
				took time.Duration
			}
			written := make(chan outcome, 1)
			start := time.Now()
			go func() {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				err := c.write(ctx, r, e)
				written <- outcome{err, time.Since(start)}
			}()
			time.Sleep(300 * time.Millisecond)
			if err := jsstore.DefaultTopology().Ensure(ctx, j, nil); err != nil {
				t.Fatal(err)
			}
			o := <-written
			if o.err != nil || o.took > 2500*time.Millisecond {
				t.Fatalf("written after %s: %v; want the second copy (sent after 1 s) stored", o.took.Round(time.Millisecond), o.err)
			}
			t.Logf("written %s after the write began", o.took.Round(time.Millisecond))
			if !c.stored(ctx, r, e) {
				t.Fatal("not stored")
			}
		})
	}
}

// TestResultKeys: Keys lists every key with a record, once, with the time
// of its last write, and not the keys deleted since; on an empty bucket it
// returns at once.
func TestResultKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := js(t)
	r, err := jsstore.OpenResults(ctx, j, j)
	if err != nil {
		t.Fatal(err)
	}
	list := func() map[string]time.Time {
		t.Helper()
		got := map[string]time.Time{}
		if err := r.Keys(ctx, func(key string, at time.Time) {
			if _, twice := got[key]; twice {
				t.Fatalf("key %s listed twice", key)
			}
			got[key] = at
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("empty bucket: %v", got)
	}
	before := time.Now().Add(-time.Second)
	want := map[string]bool{}
	for i := range 300 {
		key := idempotency.KeyHash("t", fmt.Sprintf("k%d", i))
		if _, _, err := r.Claim(ctx, key, idempotency.Pending(oid(1), "fp")); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // written twice: listed once
			if err := r.Save(ctx, key, idempotency.Record{State: idempotency.StateCompleted, OrderID: oid(1), Fingerprint: "fp", Status: 201, Body: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
		want[key] = true
	}
	gone := idempotency.KeyHash("t", "k7")
	if err := r.Purge(ctx, gone); err != nil {
		t.Fatal(err)
	}
	delete(want, gone)
	got := list()
	if len(got) != len(want) {
		t.Fatalf("%d keys listed, want %d", len(got), len(want))
	}
	for key, at := range got {
		if !want[key] || at.Before(before) || at.After(time.Now()) {
			t.Fatalf("key %s at %s: not expected", key, at)
		}
	}
}

// followedEvents opens ORDER_EVENTS on a new server and follows its decisions.
func followedEvents(t *testing.T) (*jsstore.Events, <-chan string) {
	t.Helper()
	e, decided, _ := followedEventsOn(t, js(t))
	return e, decided
}

// followedEventsOn opens ORDER_EVENTS with j and follows its decisions;
// live is the feed's.
func followedEventsOn(t *testing.T, j jetstream.JetStream) (e *jsstore.Events, decided <-chan string, live func() error) {
	t.Helper()
	ctx := context.Background()
	e, err := jsstore.OpenEvents(ctx, j, j)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	stop, live, err := e.FollowDecisions(ctx, func(id string) { ch <- id })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return e, ch, live
}

func TestEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, decided := followedEvents(t)
	id := events.OrderID(7, events.NewNonce())
	if _, ok, err := e.Event(ctx, id); ok || err != nil {
		t.Fatalf("event before: %v %v", ok, err)
	}
	if stored, err := e.Append(ctx, events.KindCreated, id, []byte(`{"first":true}`)); err != nil || !stored {
		t.Fatal(stored, err)
	}
	// A second terminal event of the order is refused, without an error (the
	// work is done) and said not stored; so is the same event again.
	if stored, err := e.Append(ctx, events.KindRejected, id, []byte(`{"second":true}`)); err != nil || stored {
		t.Fatal(stored, err)
	}
	if stored, err := e.Append(ctx, events.KindCreated, id, []byte(`{"first":true}`)); err != nil || stored {
		t.Fatal(stored, err)
	}
	data, ok, err := e.Event(ctx, id)
	if !ok || err != nil || string(data) != `{"first":true}` {
		t.Fatalf("event: %s %v %v", data, ok, err)
	}
	select {
	case got := <-decided:
		if got != id {
			t.Fatalf("followed %s, want %s", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the decision was not followed")
	}
	// IDs that are not order IDs never become subjects.
	for _, bad := range []string{">", "*", "ord_*", "a b", "..", ""} {
		if _, ok, err := e.Event(ctx, bad); ok || err != nil {
			t.Fatalf("event %q: %v %v", bad, ok, err)
		}
		if _, err := e.Append(ctx, events.KindCreated, bad, []byte("{}")); err == nil {
			t.Fatalf("append %q succeeded", bad)
		}
	}
	n := 0
	if err := e.Each(ctx, func([]byte, uint64) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("each: %d %v", n, err)
	}
}

// TestEventsSayWhatWasDecidedBelow: after SetDecidedBelow, every appended
// event carries events.HeaderDecidedBelow, the newest reading, lower ones
// too (the consumer may have been made again from an earlier command);
// before it none does, and neither after a reading of 1 or less.
func TestEventsSayWhatWasDecidedBelow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j, _, e := stores(t)
	evs, err := j.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		set  uint64 // 0: none
		want string
	}{{0, ""}, {1, ""}, {9, "9"}, {3, "3"}, {12, "12"}, {1, ""}} {
		if c.set > 0 {
			e.SetDecidedBelow(c.set)
		}
		id := events.OrderID(uint64(i+1), events.NewNonce())
		if stored, err := e.Append(ctx, events.KindCreated, id, []byte("{}")); err != nil || !stored {
			t.Fatal(stored, err)
		}
		m, err := evs.GetLastMsgForSubject(ctx, events.EventSubject(events.KindCreated, id))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(events.HeaderDecidedBelow); got != c.want {
			t.Errorf("after SetDecidedBelow(%d): the event says %q, want %q", c.set, got, c.want)
		}
	}
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("decode"), false},
		{fmt.Errorf("claim: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("store: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{nats.ErrConnectionClosed, true},
		{jetstream.ErrAsyncPublishTimeout, true}, // an ack given up (NewJetStream)
		{&jetstream.APIError{Code: 500, ErrorCode: 10077, Description: "no space left on device"}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10023}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10002}, true},  // the account's storage limit
		{&jetstream.APIError{Code: 400, ErrorCode: 10071}, false}, // wrong last sequence: an answer, not a fault
		{&jetstream.APIError{Code: 400, ErrorCode: 10005}, true},  // no peers yet
	} {
		if got := jsstore.IsUnavailable(tc.err); got != tc.want {
			t.Errorf("IsUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestStoreErrorSaysWhatARetryCanDo: the API tries a publish again within
// its request only when it is Temporary; a refusal of the disk guard is
// not (the free space does not come back in seconds), though it stored
// nothing and NATS may take the write later.
func TestStoreErrorSaysWhatARetryCanDo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err                  error
		temporary, notStored bool
	}{
		{fmt.Errorf("%w: 100 KiB free", jsstore.ErrStorageLow), false, true},
		{nats.ErrNoResponders, true, true},
		// What a publish answers after its tries all met no responders (a
		// stream without a leader): nobody received it.
		{jetstream.ErrNoStreamResponse, true, true},
		{fmt.Errorf("publish: %w", jetstream.ErrNoStreamResponse), true, true},
		{context.DeadlineExceeded, true, false},
		{errors.New("decode"), false, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10002, Description: "resource limits exceeded for account"}, false, true},
	} {
		e := &jsstore.StoreError{Err: tc.err}
		if e.Temporary() != tc.temporary || e.NotStored() != tc.notStored {
			t.Errorf("%v: Temporary %v NotStored %v, want %v %v", tc.err, e.Temporary(), e.NotStored(), tc.temporary, tc.notStored)
		}
	}
	if !jsstore.IsUnavailable(jsstore.ErrStorageLow) {
		t.Error("a refusal for want of space is no longer a fault of the store: the pipeline would give its command up")
	}
}

func TestConnectGivesUpWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	port := orderlytest.FreePort(t)
	if _, err := jsstore.Connect(ctx, jsstore.ConnectConfig{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Name: "t"}, nil); err == nil {
		t.Fatal("connected to nothing")
	}
}

// TestKeyClaims: the keyed events of ADR 0010. The event of a keyed order is
// its key's claim: the first event of a key is stored; another order's event
// expecting the key to have none is not;
// KeyEvent reads the holder, by whose sequence a key free again (after the
// result TTL) can be claimed by a newer order; a keyed order ID reads its own
// event and is followed as a decision; hashes that are not keys never become
// subjects.
func TestKeyClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, decided := followedEvents(t)
	keyA, keyB := idempotency.KeyHash("t", "a"), idempotency.KeyHash("t", "b")
	tokenA, _ := events.KeyToken(keyA)
	tokenB, _ := events.KeyToken(keyB)
	claim := func(k events.Kind, token string, seq uint64, data string, after uint64) (bool, error) {
		if after == 0 && seq%2 == 1 { // Append and AppendAll make the same claim
			return e.Append(ctx, k, events.KeyedOrderID(seq, token), []byte(data))
		}
		o := e.AppendAll(ctx, []jsstore.AppendRequest{{Kind: k, OrderID: events.KeyedOrderID(seq, token), Data: []byte(data), After: after}})[0]
		return o.Stored, o.Err
	}
	if _, ok, err := e.KeyEvent(ctx, keyA); ok || err != nil {
		t.Fatalf("key event before: %v %v", ok, err)
	}
	if stored, err := claim(events.KindCreated, tokenA, 1, `{"order":1}`, 0); err != nil || !stored {
		t.Fatalf("first claim: %v %v", stored, err)
	}
	for _, k := range []events.Kind{events.KindCreated, events.KindRejected} {
		if stored, err := claim(k, tokenA, 2, `{"order":2}`, 0); err != nil || stored {
			t.Fatalf("second order's %s claim: %v %v, want refused", k, stored, err)
		}
	}
	if stored, err := claim(events.KindCreated, tokenB, 3, `{"order":3}`, 0); err != nil || !stored {
		t.Fatalf("another key's claim: %v %v", stored, err)
	}
	holder, ok, err := e.KeyEvent(ctx, keyA)
	if err != nil || !ok || string(holder.Data) != `{"order":1}` || holder.Subject != events.KeyedEventSubject(events.KindCreated, tokenA, 1) || holder.Stored.IsZero() {
		t.Fatalf("key event: %+v %v %v", holder, ok, err)
	}
	// Free again: a newer order claims the key by the holder's sequence, once.
	if stored, err := claim(events.KindCreated, tokenA, 4, `{"order":4}`, holder.Seq); err != nil || !stored {
		t.Fatalf("claim after the holder: %v %v", stored, err)
	}
	if stored, err := claim(events.KindCreated, tokenA, 5, `{"order":5}`, holder.Seq); err != nil || stored {
		t.Fatalf("a second claim after the same holder: %v %v, want refused", stored, err)
	}
	if now, _, _ := e.KeyEvent(ctx, keyA); string(now.Data) != `{"order":4}` {
		t.Fatalf("key event after: %s", now.Data)
	}
	// Orders read by their keyed IDs; the first decision followed under its keyed ID.
	for seq, want := range map[uint64]string{1: `{"order":1}`, 4: `{"order":4}`} {
		data, ok, err := e.Event(ctx, events.KeyedOrderID(seq, tokenA))
		if err != nil || !ok || string(data) != want {
			t.Fatalf("event of keyed order %d: %s %v %v", seq, data, ok, err)
		}
	}
	if _, ok, err := e.Event(ctx, events.KeyedOrderID(2, tokenA)); ok || err != nil {
		t.Fatalf("the refused order has an event: %v %v", ok, err)
	}
	select {
	case got := <-decided:
		if want := events.KeyedOrderID(1, tokenA); got != want {
			t.Fatalf("followed %s, want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the keyed decision was not followed")
	}
	for _, bad := range []string{"", "short", strings.Repeat("a", 19) + ".*", strings.Repeat(">", 43)} {
		if _, ok, err := e.KeyEvent(ctx, bad); ok || err != nil {
			t.Fatalf("key event of %q: %v %v", bad, ok, err)
		}
	}
	// Order IDs that are neither form, and a replacing condition on an
	// order of the nonce form, are refused before anything is sent.
	for _, q := range []jsstore.AppendRequest{
		{Kind: events.KindCreated, OrderID: "ord_>", Data: []byte("{}")},
		{Kind: events.KindCreated, OrderID: events.KeyedOrderID(9, tokenA) + ".x", Data: []byte("{}")},
		{Kind: events.KindCreated, OrderID: events.OrderID(9, "N0NCE0000000A"), Data: []byte("{}"), After: 1},
	} {
		if o := e.AppendAll(ctx, []jsstore.AppendRequest{q})[0]; o.Err == nil || o.Stored {
			t.Fatalf("append %+v: %+v, want refused", q, o)
		}
	}
}

// TestKeyFeeds: FollowKeys delivers each keyed event stored after it
// returns, with its key's token and data, and no event of the nonce form;
// KeyTokens reads the tokens of the keyed events stored since a time.
func TestKeyFeeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _ := followedEvents(t)
	followed := make(chan string, 10)
	stop, live, err := e.FollowKeys(ctx, func(token string, data []byte) { followed <- token + " " + string(data) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	before := time.Now()
	tokenA, _ := events.KeyToken(idempotency.KeyHash("t", "a"))
	tokenB, _ := events.KeyToken(idempotency.KeyHash("t", "b"))
	for i, id := range []string{events.KeyedOrderID(1, tokenA), events.OrderID(2, "N0NCE0000000A"), events.KeyedOrderID(3, tokenB)} {
		if stored, err := e.Append(ctx, events.KindCreated, id, []byte(strconv.Itoa(i))); err != nil || !stored {
			t.Fatalf("append %s: %v %v", id, stored, err)
		}
	}
	for _, want := range []string{tokenA + " 0", tokenB + " 2"} {
		select {
		case got := <-followed:
			if got != want {
				t.Fatalf("followed %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not followed", want)
		}
	}
	if err := live(); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	if err := e.KeyTokens(ctx, before.Add(-time.Second), func(token string, at time.Time) {
		if at.Before(before.Add(-time.Second)) {
			t.Errorf("token %s stored at %s", token, at)
		}
		tokens = append(tokens, token)
	}); err != nil || len(tokens) != 2 || tokens[0] != tokenA || tokens[1] != tokenB {
		t.Fatalf("tokens since before: %v %v", tokens, err)
	}
	if err := e.KeyTokens(ctx, time.Now().Add(time.Minute), func(token string, _ time.Time) { t.Errorf("token %s from the future", token) }); err != nil {
		t.Fatal(err)
	}
	if at, ok := e.NewestKeyClaim(ctx); !ok || at.Before(before.Add(-time.Second)) {
		t.Fatalf("newest key claim: %s %v", at, ok)
	}
}

// TestReadsLeaveNoConsumer: Keys, KeyTokens and Each delete their ordered
// consumer when they return, whether they read something or found nothing
// pending, and a feed deletes its own when stopped; the server kept each for
// nats.go's inactive threshold (5 minutes) otherwise, one more for every API
// start.
func TestReadsLeaveNoConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := js(t)
	e, err := jsstore.OpenEvents(ctx, j, j)
	if err != nil {
		t.Fatal(err)
	}
	r, err := jsstore.OpenResults(ctx, j, j)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func(stream string) int {
		t.Helper()
		s, err := j.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Consumers
	}
	reads := func() {
		t.Helper()
		if err := r.Keys(ctx, func(string, time.Time) {}); err != nil {
			t.Fatal(err)
		}
		if err := e.KeyTokens(ctx, time.Now().Add(-time.Hour), func(string, time.Time) {}); err != nil {
			t.Fatal(err)
		}
		if err := e.Each(ctx, func([]byte, uint64) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if n, m := consumers(jsstore.ResultsStream), consumers(events.EventStream); n != 0 || m != 0 {
			t.Fatalf("%d consumers left on %s, %d on %s", n, jsstore.ResultsStream, m, events.EventStream)
		}
	}
	reads() // nothing pending
	// A stopped feed deletes its consumer too: the long polls' feed stops
	// when idle and starts with the next waiter.
	for range 3 {
		stop, _, err := e.FollowDecisions(ctx, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		if n := consumers(events.EventStream); n != 1 {
			t.Fatalf("%d consumers of a feed", n)
		}
		stop()
		for deadline := time.Now().Add(5 * time.Second); consumers(events.EventStream) != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a stopped feed's consumer is still there after 5 s")
			}
		}
	}
	token, _ := events.KeyToken(idempotency.KeyHash("t", "a"))
	if stored, err := e.Append(ctx, events.KindCreated, events.KeyedOrderID(1, token), []byte("{}")); err != nil || !stored {
		t.Fatalf("append: %v %v", stored, err)
	}
	if _, _, err := r.Claim(ctx, idempotency.KeyHash("t", "a"), idempotency.Pending(oid(1), "fp")); err != nil {
		t.Fatal(err)
	}
	reads()
}

// A subscription that never finishes what it holds (its handler stuck) must
// not keep a shutdown's drain from flushing the publishes and closing within
// the connection's DrainTimeout: nats.go's own default (30 s) outlasted what
// a shutdown had left after a failover (TestFailoverUnderCheck in CI).
func TestDrainFlushesPastAStuckSubscription(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := natsserver.Start(ctx, natsserver.Config{ServerName: "drain", StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", Fsync: natsserver.Fsync{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := jsstore.Connect(ctx, jsstore.ConnectConfig{URL: ns.ClientURL(), Name: "drained", DrainTimeout: 500 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := jsstore.Connect(ctx, jsstore.ConnectConfig{URL: ns.ClientURL(), Name: "other"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	release, stuck := make(chan struct{}), make(chan struct{}, 2)
	defer close(release)
	if _, err := nc.Subscribe("stuck", func(*nats.Msg) { stuck <- struct{}{}; <-release }); err != nil {
		t.Fatal(err)
	}
	out, err := other.SubscribeSync("out")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // one in the handler, one waiting behind it
		if err := other.Publish("stuck", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	<-stuck
	if err := nc.Publish("out", []byte("last words")); err != nil {
		t.Fatal(err)
	}

	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	began := time.Now()
	if err := jsstore.Drain(dctx, nc); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the drain took %s with a DrainTimeout of 500ms", took)
	}
	if m, err := out.NextMsg(5 * time.Second); err != nil || string(m.Data) != "last words" {
		t.Fatalf("the publish made before the drain: %v %v", m, err)
	}
}

// TestDialSaysWhatToDoWhenNothingListens: a tool pointed at an address where
// no NATS runs names the flag that points it elsewhere and what to start.
func TestDialSaysWhatToDoWhenNothingListens(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close() // nothing listens there now
	_, err = jsstore.Dial(url, jsstore.Credentials{}, "test")
	if err == nil {
		t.Fatal("Dial succeeded with nothing listening")
	}
	for _, want := range []string{l.Addr().String(), "--nats-url", "orderly serve"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// oid is a well-formed order ID for sequence n: the store refuses records of
// anything else.
func oid(n uint64) string { return events.OrderID(n, "ABCDEFGHJKMNP") }
