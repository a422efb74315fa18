package jsstore

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/natsserver"
)

// TestBatchKeepsOneConditionPerFilter: messages whose conditions name one
// subject filter never share an atomic batch, where the server would check
// each against the stream as it was before the batch and store them all
// (docs/nats-facts.md, fact 13). A batch as the flusher would send it holds
// two claims of key a and one of key b, each expecting its key to have no
// event yet: one event of a and one of b are stored, and the loser of a gets
// a wrong-last-sequence error.
func TestBatchKeepsOneConditionPerFilter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := StartBare(t, natsserver.Fsync{Always: true})
	stream, err := js.CreateStream(ctx, DefaultTopology().EventStreamConfig())
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatcher(js, 1, 5*time.Second)
	t.Cleanup(b.Stop)

	claim := func(key, order string) *batchItem {
		m := &nats.Msg{Subject: events.EventSubjectPrefix + "created." + key + "." + order, Data: []byte(key + order)}
		SetExpectLastSubjectSeq(m, 0, events.EventSubjectPrefix+"*."+key+".*")
		return &batchItem{ctx: ctx, msg: m, done: make(chan struct{})}
	}
	items := []*batchItem{claim("a", "o1"), claim("a", "o2"), claim("b", "o1")}
	b.send(items)
	for i, it := range items {
		<-it.done
		switch {
		case i == 1 && !IsWrongLastSequence(it.err):
			t.Errorf("second claim of a: %+v %v, want wrong last sequence", it.ack, it.err)
		case i != 1 && it.err != nil:
			t.Errorf("claim %d: %v", i, it.err)
		}
	}
	for _, key := range []string{"a", "b"} {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.EventSubjectPrefix+"*."+key+".*"))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		if n != 1 {
			t.Errorf("key %s: %d events stored, want 1", key, n)
		}
	}
}

// StartBare starts an embedded server without orderly's topology for a test
// of this directory (the external tests use it too) and returns a JetStream
// context on it; everything stops when the test ends.
func StartBare(t testing.TB, fsync natsserver.Fsync) jetstream.JetStream {
	t.Helper()
	stop, js := StartBareAt(t, t.TempDir(), fsync)
	t.Cleanup(stop)
	return js
}

// StartBareAt is StartBare on the store directory dir; stop shuts the server
// down (a benchmark restarts one on the same directory).
func StartBareAt(t testing.TB, dir string, fsync natsserver.Fsync) (stop func(), js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := natsserver.Start(ctx, natsserver.Config{ServerName: "t", StoreDir: dir, Fsync: fsync})
	if err != nil {
		t.Fatal(err)
	}
	stop = func() { ns.Shutdown(); ns.WaitForShutdown() }
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if js, err = jetstream.New(nc); err != nil {
		stop()
		t.Fatal(err)
	}
	return stop, js
}

// TestWaitedFor: a batch's commit is waited for until its last caller's
// deadline, within the Batcher's timeout; a caller without a deadline waits
// the whole timeout.
func TestWaitedFor(t *testing.T) {
	t.Parallel()
	item := func(d time.Duration) *batchItem {
		if d == 0 {
			return &batchItem{ctx: context.Background()}
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return &batchItem{ctx: ctx}
	}
	const timeout = 10 * time.Second
	for _, tc := range []struct {
		name  string
		items []*batchItem
		want  time.Duration
	}{
		{"the last caller's deadline", []*batchItem{item(time.Second), item(3 * time.Second), item(2 * time.Second)}, 3 * time.Second},
		{"within the timeout", []*batchItem{item(time.Second), item(time.Minute)}, timeout},
		{"a caller without a deadline", []*batchItem{item(time.Second), item(0)}, timeout},
	} {
		got := time.Until(waitedFor(tc.items, timeout))
		if got > tc.want || got < tc.want-time.Second {
			t.Errorf("%s: %s, want %s", tc.name, got.Round(time.Millisecond), tc.want)
		}
	}
}
