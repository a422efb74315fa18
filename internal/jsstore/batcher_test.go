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

// TestBatcherGivesUpABatchItsCallersGaveUp: a batch whose commit no one
// answers (sent to a stream leader that hangs; here a subscriber that never
// answers holds the subject) holds its flusher only as long as its callers
// wait, not the Batcher's whole timeout: the next message, once a stream
// takes the subject, is stored while the lost batch's timeout still runs.
// On the code before, the one flusher waited out the 30 s timeout and the
// next message failed after its 3 s.
func TestBatcherGivesUpABatchItsCallersGaveUp(t *testing.T) {
	t.Parallel()
	js := orderlytest.JetStream(t, natsserver.Fsync{Interval: time.Second})
	b := jsstore.NewBatcher(js, 1, 30*time.Second)
	t.Cleanup(b.Stop)
	silent, err := js.Conn().Subscribe("held.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(wait time.Duration, subject string) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, err := b.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(subject)})
		return err
	}
	// The first message keeps the flusher busy for 300 ms, alone; the two
	// queued meanwhile go out as one batch, and their callers wait 1 s.
	var wg sync.WaitGroup
	wg.Go(func() { _ = publish(300*time.Millisecond, "held.first") })
	time.Sleep(50 * time.Millisecond)
	for _, s := range []string{"held.a", "held.b"} {
		wg.Go(func() { _ = publish(time.Second, s) })
	}
	wg.Wait()
	if batches, _ := b.Stats(); batches != 1 {
		t.Fatalf("%d atomic batches sent, want the two queued messages as one", batches)
	}
	if err := silent.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "HELD", Subjects: []string{"held.>"}, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := publish(3*time.Second, "held.next"); err != nil {
		t.Fatalf("the message after the lost batch: %v after %s (its flusher still waits for the batch)", err, time.Since(start).Round(time.Millisecond))
	}
}
