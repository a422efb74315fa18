package jsstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestBatcher: concurrent publishes go out as atomic batches, every caller gets
// the sequence its own message was stored at, and a batch with a duplicate or a
// broken condition falls back to one-by-one publishes so that each caller gets
// its own answer.
func TestBatcher(t *testing.T) {
	t.Parallel()
	js := orderlytest.JetStream(t, natsserver.Fsync{Always: true})
	b := jsstore.NewBatcher(js, 2, 5*time.Second)
	t.Cleanup(b.Stop)
	ctx := context.Background()
	stream, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}

	const n = 200
	acks := make([]*jetstream.PubAck, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := &nats.Msg{Subject: events.EventSubject(events.KindCreated, "o"+strconv.Itoa(i)), Data: []byte(strconv.Itoa(i))}
			jsstore.SetMsgID(msg, "id-"+strconv.Itoa(i))
			acks[i], errs[i] = b.PublishMsg(ctx, msg)
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("publish %d: %v", i, errs[i])
		}
		if seen[acks[i].Sequence] {
			t.Fatalf("sequence %d acked twice", acks[i].Sequence)
		}
		seen[acks[i].Sequence] = true
		m, err := stream.GetMsg(ctx, acks[i].Sequence)
		if err != nil || string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("message %d is not at its acked sequence %d: %v %q", i, acks[i].Sequence, err, m.Data)
		}
	}
	if batches, msgs := b.Stats(); batches == 0 || msgs < 2*batches {
		t.Fatalf("%d batches of %d messages: the publishes were not grouped", batches, msgs)
	}

	// A duplicate and a broken expectation among good messages.
	type result struct {
		ack *jetstream.PubAck
		err error
	}
	dup := &nats.Msg{Subject: events.EventSubject(events.KindCreated, "o0"), Data: []byte("again")}
	jsstore.SetMsgID(dup, "id-0")
	cond := &nats.Msg{Subject: events.EventSubject(events.KindRejected, "o1"), Data: []byte("second event")}
	jsstore.SetExpectLastSubjectSeq(cond, 0, events.OrderSubjects("o1"))
	good := &nats.Msg{Subject: events.EventSubject(events.KindCreated, "new"), Data: []byte("new")}
	jsstore.SetExpectLastSubjectSeq(good, 0, events.OrderSubjects("new"))
	results := make([]result, 3)
	for i, m := range []*nats.Msg{dup, cond, good} {
		wg.Add(1)
		go func() { defer wg.Done(); a, err := b.PublishMsg(ctx, m); results[i] = result{a, err} }()
	}
	wg.Wait()
	if r := results[0]; r.err != nil || !r.ack.Duplicate || r.ack.Sequence != acks[0].Sequence {
		t.Fatalf("duplicate: %+v %v, want a duplicate ack of sequence %d", r.ack, r.err, acks[0].Sequence)
	}
	if r := results[1]; !jsstore.IsWrongLastSequence(r.err) {
		t.Fatalf("broken expectation: %+v %v, want wrong last sequence", r.ack, r.err)
	}
	if r := results[2]; r.err != nil || r.ack.Duplicate {
		t.Fatalf("good message: %+v %v", r.ack, r.err)
	}
}
