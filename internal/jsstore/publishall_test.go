package jsstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
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
	j := js(t)
	pub := jsstore.FastPublish(j, 5*time.Second)
	r, err := jsstore.OpenResults(ctx, j, pub)
	if err != nil {
		t.Fatal(err)
	}
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

	e, err := jsstore.OpenEvents(ctx, j, pub)
	if err != nil {
		t.Fatal(err)
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
