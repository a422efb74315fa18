package jsstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestPublishAllAnswersAsPublishMsg: a batch published at once gets, message
// by message, what PublishMsg answers: a stored message, a duplicate of an
// earlier one and of one in the same batch, a broken condition, and a
// subject no stream takes. Messages of one subject are stored in the
// batch's order.
func TestPublishAllAnswersAsPublishMsg(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := js(t)
	fast := jsstore.FastPublish(plain, 5*time.Second)
	if _, err := plain.CreateStream(ctx, jetstream.StreamConfig{Name: "ALL", Subjects: []string{"all.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	msg := func(subject, id string, expectLast int64) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: []byte(subject + id), Header: nats.Header{}}
		if id != "" {
			jsstore.SetMsgID(m, id)
		}
		if expectLast >= 0 {
			jsstore.SetExpectLastSubjectSeq(m, uint64(expectLast), "")
		}
		return m
	}
	if _, err := fast.PublishMsg(ctx, msg("all.before", "id-0", -1)); err != nil {
		t.Fatal(err)
	}
	res := jsstore.PublishAll(ctx, fast, []*nats.Msg{
		msg("all.a", "", -1),
		msg("all.b", "id-0", -1), // a duplicate of the one before
		msg("all.c", "id-1", -1),
		msg("all.c", "id-1", -1), // a duplicate within the batch
		msg("all.d", "", 0),      // the first of all.d
		msg("all.d", "", 0),      // refused: all.d has one now
		msg("nostream.x", "", -1),
	})
	check := func(i int, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("message %d: %+v %v", i, res[i].Ack, res[i].Err)
		}
	}
	check(0, res[0].Err == nil && res[0].Ack.Stream == "ALL" && !res[0].Ack.Duplicate)
	check(1, res[1].Err == nil && res[1].Ack.Duplicate)
	check(2, res[2].Err == nil && !res[2].Ack.Duplicate)
	check(3, res[3].Err == nil && res[3].Ack.Duplicate && res[3].Ack.Sequence == res[2].Ack.Sequence)
	check(4, res[4].Err == nil && res[4].Ack.Sequence > res[2].Ack.Sequence)
	check(5, jsstore.IsWrongLastSequence(res[5].Err))
	check(6, errors.Is(res[6].Err, jetstream.ErrNoStreamResponse) && jsstore.IsUnavailable(res[6].Err))
}

// TestClaimAllAndAppendAll: claims and events made together each get what
// Claim and Append give: of two claims of one key in a batch the first
// wins and the second gets its record; a key claimed before keeps its
// holder; an order's second event in a batch is refused, as is one stored
// before; an ID that is not an order ID is an error of its own.
func TestClaimAllAndAppendAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, r, e := stores(t)
	rec := func(orderID string) idempotency.Record {
		return idempotency.Record{State: idempotency.StateCompleted, OrderID: orderID, Fingerprint: "fp", Status: 201, Body: []byte(`{}`)}
	}
	k1, k2, k3 := idempotency.KeyHash("t", "k1"), idempotency.KeyHash("t", "k2"), idempotency.KeyHash("t", "k3")
	if _, won, err := r.Claim(ctx, k3, rec(oid(3))); err != nil || !won {
		t.Fatal(won, err)
	}
	claims := r.ClaimAll(ctx, []jsstore.ClaimRequest{{Key: k1, Record: rec(oid(1))}, {Key: k2, Record: rec(oid(2))}, {Key: k1, Record: rec(oid(11))}, {Key: k3, Record: rec(oid(13))}})
	want := []struct {
		won    bool
		holder string
	}{{true, oid(1)}, {true, oid(2)}, {false, oid(1)}, {false, oid(3)}}
	for i, w := range want {
		if c := claims[i]; c.Err != nil || c.Won != w.won || c.Holder.OrderID != w.holder {
			t.Errorf("claim %d: won %v holder %s err %v, want won %v holder %s", i, c.Won, c.Holder.OrderID, c.Err, w.won, w.holder)
		}
	}

	a, b, c := events.OrderID(1, events.NewNonce()), events.OrderID(2, events.NewNonce()), events.OrderID(3, events.NewNonce())
	if stored, err := e.Append(ctx, events.KindCreated, a, []byte(`{"a":1}`)); err != nil || !stored {
		t.Fatal(stored, err)
	}
	appended := e.AppendAll(ctx, []jsstore.AppendRequest{
		{Kind: events.KindCreated, OrderID: b, Data: []byte(`{"b":1}`)},
		{Kind: events.KindCreated, OrderID: c, Data: []byte(`{"c":1}`)},
		{Kind: events.KindRejected, OrderID: b, Data: []byte(`{"b":2}`)}, // b's second event
		{Kind: events.KindCreated, OrderID: a, Data: []byte(`{"a":1}`)},  // stored before
		{Kind: events.KindCreated, OrderID: "ord_*", Data: []byte(`{}`)},
	})
	for i, w := range []bool{true, true, false, false} {
		if got := appended[i]; got.Err != nil || got.Stored != w {
			t.Errorf("event %d: stored %v err %v, want stored %v", i, got.Stored, got.Err, w)
		}
	}
	if appended[4].Err == nil {
		t.Error("an event of an invalid order ID was stored")
	}
	if data, ok, err := e.Event(ctx, b); err != nil || !ok || string(data) != `{"b":1}` {
		t.Errorf("b's event: %s %v %v", data, ok, err)
	}
}

// TestPublishMsgsSendsAgainWhatGoesUnanswered: a publish that reaches no
// stream but is not refused either (a stream's leader that hangs keeps its
// interest in the stream's subjects on the other nodes until its routes are
// given up; here a subscriber that never answers) is sent again after a
// second, and the second copy is stored once the stream takes its subjects
// (here created 300 ms in; an election in a cluster). The batch's messages
// and a lone message alike, each stored once, through PublishMsgs and
// through a Batcher (--batch-writes: PublishAll sends each message through
// its PublishMsg). On the code before, every one waited for the end of its
// context (5 s) and failed: PublishMsgs until d7895fc, a Batcher until the
// commit after it.
func TestPublishMsgsSendsAgainWhatGoesUnanswered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		pub  func(jetstream.JetStream) jsstore.Publisher
	}{
		{"PublishMsgs", func(js jetstream.JetStream) jsstore.Publisher { return js }},
		{"Batcher", func(js jetstream.JetStream) jsstore.Publisher {
			b := jsstore.NewBatcher(js, 4, 10*time.Second)
			t.Cleanup(b.Stop)
			return b
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			plain := js(t)
			sendsAgain(t, plain, c.pub(jsstore.FastPublish(plain, 5*time.Second)))
		})
	}
}

func sendsAgain(t *testing.T, plain jetstream.JetStream, pub jsstore.Publisher) {
	ctx := context.Background()
	silent, err := plain.Conn().Subscribe("late.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe() //nolint:errcheck // the test's connection closes anyway
	msg := func(subject string) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: []byte(subject), Header: nats.Header{}}
		jsstore.SetMsgID(m, subject)
		return m
	}
	type outcome struct {
		res  []jsstore.PubResult
		took time.Duration
	}
	batch, lone := make(chan outcome, 1), make(chan outcome, 1)
	start := time.Now()
	for _, c := range []struct {
		out  chan outcome
		msgs []*nats.Msg
	}{{batch, []*nats.Msg{msg("late.a"), msg("late.b"), msg("late.c")}}, {lone, []*nats.Msg{msg("late.d")}}} {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			res := jsstore.PublishAll(ctx, pub, c.msgs)
			c.out <- outcome{res, time.Since(start)}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := plain.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}, Duplicates: time.Minute, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]chan outcome{"batch": batch, "lone message": lone} {
		o := <-out
		for i, r := range o.res {
			if r.Err != nil || r.Ack == nil || r.Ack.Duplicate {
				t.Errorf("%s, message %d: %+v %v after %s", name, i, r.Ack, r.Err, o.took.Round(time.Millisecond))
			}
		}
		if o.took > 2500*time.Millisecond {
			t.Errorf("%s: stored %s after its publish, want its second copy (sent after 1 s) stored", name, o.took.Round(time.Millisecond))
		}
		t.Logf("%s stored %s after its publish", name, o.took.Round(time.Millisecond))
	}
	if n := orderlytest.Stored(t, plain, "LATE"); n != 4 {
		t.Errorf("%d messages stored, want 4", n)
	}
}

// TestPublishMsgsTakesTheAckOfAnEarlierCopy: a message sent again whose
// earlier copy's ack comes late (a responder that answers each copy after a
// delay of its own, a second copy of an ID as a duplicate, as the stream
// would): the earlier copy's ack is the answer, stored and not a duplicate.
// Taking the later copy's would say that another request stored the
// message. The first copy is watched to the end; a copy between the first
// and the last is heard when the last one's refusal comes after it.
func TestPublishMsgsTakesTheAckOfAnEarlierCopy(t *testing.T) {
	t.Parallel()
	plain := js(t)
	fast := jsstore.FastPublish(plain, 5*time.Second).(jsstore.BatchPublisher)
	const never = -1
	var mu sync.Mutex
	seen := map[string]int{}
	stored := map[string]bool{}            // a copy answered stores its ID
	delays := map[string][]time.Duration{} // by ID prefix, for each copy
	sub, err := plain.Conn().Subscribe("slow.>", func(m *nats.Msg) {
		id := m.Header.Get("Nats-Msg-Id")
		mu.Lock()
		seen[id]++
		copies := seen[id]
		d := delays[strings.SplitN(id, "/", 2)[0]][copies-1]
		if d == never {
			mu.Unlock()
			return
		}
		duplicate := stored[id]
		stored[id] = true
		mu.Unlock()
		time.AfterFunc(d, func() {
			m.Respond(fmt.Appendf(nil, `{"stream":"SLOW","seq":%d,"duplicate":%v}`, len(id), duplicate)) //nolint:errcheck // the test reads the outcome
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the test's connection closes anyway
	for _, c := range []struct {
		name    string
		n       int
		delays  []time.Duration
		answer  time.Duration // when the ack wanted comes
		waitFor time.Duration // what the test allows
	}{
		// The first copy answers at 1.5 s, its second copy (sent at 1 s) at 2.5 s.
		{"first copy late, a batch", 2, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond}, 1500 * time.Millisecond, 2 * time.Second},
		{"first copy late, a lone message", 1, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond}, 1500 * time.Millisecond, 2 * time.Second},
		// The first copy is lost; the second (sent at 1 s) answers at 3.5 s,
		// after the third was sent (at 3 s), which answers at 3.6 s.
		{"second copy late", 2, []time.Duration{never, 2500 * time.Millisecond, 600 * time.Millisecond}, 3500 * time.Millisecond, 4500 * time.Millisecond},
	} {
		mu.Lock()
		delays[c.name] = c.delays
		mu.Unlock()
		msgs := make([]*nats.Msg, c.n)
		for i := range msgs {
			msgs[i] = &nats.Msg{Subject: "slow.x", Data: []byte("x"), Header: nats.Header{}}
			jsstore.SetMsgID(msgs[i], fmt.Sprintf("%s/%d", c.name, i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		res := fast.PublishMsgs(ctx, msgs)
		took := time.Since(start)
		cancel()
		for i, r := range res {
			if r.Err != nil || r.Ack == nil || r.Ack.Duplicate {
				t.Errorf("%s, message %d: %+v %v", c.name, i, r.Ack, r.Err)
			}
		}
		if took < c.answer || took > c.waitFor {
			t.Errorf("%s: answered after %s, want the earlier copy's ack (%s)", c.name, took.Round(time.Millisecond), c.answer)
		}
		mu.Lock()
		for i := range msgs {
			if id := fmt.Sprintf("%s/%d", c.name, i); seen[id] != len(c.delays) {
				t.Errorf("%s: %d copies of message %d sent, want %d", c.name, seen[id], i, len(c.delays))
			}
		}
		mu.Unlock()
	}
}

// TestUnansweredPublishesAreGivenUp: the copies of messages that no one
// answers (lost in a leader's failure; here sent to a subscriber that never
// answers) stop counting as pending in nats.go after twice the publish
// timeout, instead of until the connection is lost: past 4,000 pending,
// every asynchronous publish would wait 200 ms first.
func TestUnansweredPublishesAreGivenUp(t *testing.T) {
	t.Parallel()
	plain := js(t)
	silent, err := plain.Conn().Subscribe("lost.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe() //nolint:errcheck // the test's connection closes anyway
	pub, err := jsstore.NewJetStream(plain.Conn(), "", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := pub.(jsstore.BatchPublisher).PublishMsgs(ctx, []*nats.Msg{{Subject: "lost.a"}, {Subject: "lost.b"}, {Subject: "lost.c"}})
	for i, r := range res {
		if !jsstore.IsUnavailable(r.Err) {
			t.Errorf("message %d: %+v %v, want a timeout", i, r.Ack, r.Err)
		}
	}
	if n := pub.PublishAsyncPending(); n != 3 {
		t.Fatalf("%d publishes pending after the wait, want 3", n)
	}
	orderlytest.Eventually(t, 3*time.Second, "the unanswered publishes given up", func() bool { return pub.PublishAsyncPending() == 0 })
}
