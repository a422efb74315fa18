package jsstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestFeedWhoseConsumerCannotBeMade: while nats.go makes a feed's ordered
// consumer again (after missed heartbeats) and the cluster cannot make it
// (its node and one more of three down: no meta leader), the feed says it is
// not live for as long as that lasts, and it stops at once. nats.go reports
// the missed heartbeats once, and its Stop waits for the consumer's lock,
// which the reset holds through each attempt (10 s) and the pause after it: a
// shutdown with a node down spent 21 s there.
func TestFeedWhoseConsumerCannotBeMade(t *testing.T) {
	if testing.Short() {
		t.Skip("stops two nodes of a cluster and waits for the feed to notice; run without -short")
	}
	t.Parallel()
	cluster := orderlytest.Cluster(t, 3)
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Connect (not Dial): it reconnects the way orderly's processes do.
	nc, err := jsstore.Connect(ctx, jsstore.ConnectConfig{URL: cluster.URLs(), Name: "feed",
		Credentials: jsstore.Credentials{NkeyFile: cluster.Creds.SeedPath(natsauth.Operator)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		t.Fatal(err)
	}
	stop, live, err := e.FollowDecisions(ctx, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	cluster.StopFeedAndQuorum(t, js, events.EventStream)
	orderlytest.Eventually(t, 30*time.Second, "the feed to report the interruption", func() bool { return live() != nil })
	// And it keeps reporting it: nats.go reports the missed heartbeats once,
	// then nothing while it fails to make the consumer again.
	for range 6 {
		time.Sleep(time.Second)
		if err := live(); err == nil {
			t.Fatal("the feed counts as live while its consumer cannot be made")
		} else {
			t.Logf("live: %v", err)
		}
	}
	began := time.Now()
	stop()
	if took := time.Since(began); took > time.Second {
		t.Fatalf("the feed took %s to stop while its consumer could not be made", took.Round(time.Millisecond))
	}
}

// TestFeedReplacesAConsumerThatCannotBeMadeAgain: nats.go makes a feed's
// ordered consumer again under one name through all its attempts, for as
// long as they fail. On a cluster that placed that name on a node whose
// JetStream had stopped (its disk full), every attempt failed for minutes
// while a consumer of another name was made at once: an API stayed not
// ready, its waiting requests unanswered (ADR 0028). Here the name is taken
// by a consumer the reset cannot update, while the stream answers requests.
// After nats.go has tried for 5 s with the stream answering (25 s when it
// does not), the feed replaces the consumer with one of its own, from the
// message after the last it delivered: every event stored meanwhile is
// delivered once, in order, within 15 s (6 s measured; 26 s before the
// stream's answers counted), and the feed is live again.
func TestFeedReplacesAConsumerThatCannotBeMadeAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for nats.go's attempts; run without -short")
	}
	t.Parallel()
	ctx := context.Background()
	j := js(t)
	e, got, live := followedEventsOn(t, j)
	appendOne := func() string {
		t.Helper()
		id := events.OrderID(7, events.NewNonce())
		if stored, err := e.Append(ctx, events.KindCreated, id, []byte(`{}`)); err != nil || !stored {
			t.Fatal(stored, err)
		}
		return id
	}
	next := func(within time.Duration) (string, bool) {
		select {
		case id := <-got:
			return id, true
		case <-time.After(within):
			return "", false
		}
	}
	first := appendOne()
	if id, ok := next(5 * time.Second); !ok || id != first {
		t.Fatalf("first: %q %v", id, ok)
	}

	// The feed's consumer is <prefix>_1; nats.go's next one will be
	// <prefix>_2. Take that name with a consumer the reset cannot update
	// (another ack policy), then delete the feed's.
	s, err := j.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	var current string
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		if strings.HasSuffix(name, "_1") {
			current = name
		}
	}
	if current == "" {
		t.Fatal("the feed's consumer is not listed")
	}
	if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: strings.TrimSuffix(current, "_1") + "_2",
		AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConsumer(ctx, current); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	want := []string{appendOne(), appendOne()}
	orderlytest.Eventually(t, 10*time.Second, "the feed to report the interruption", func() bool { return live() != nil })
	t.Logf("interrupted: %v", live())
	for i, w := range want {
		id, ok := next(60 * time.Second)
		if !ok {
			t.Fatalf("event %d stored after the consumer was lost was not delivered within 60 s (live: %v)", i+1, live())
		}
		if id != w {
			t.Fatalf("event %d: delivered %s, want %s", i+1, id, w)
		}
	}
	took := time.Since(cut)
	t.Logf("delivered again %s after the consumer was lost", took.Round(100*time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("delivered again %s after the consumer was lost, while the stream answered: more than 15 s", took.Round(100*time.Millisecond))
	}
	orderlytest.Eventually(t, 10*time.Second, "the feed to be live again", func() bool { return live() == nil })
	after := appendOne()
	if id, ok := next(5 * time.Second); !ok || id != after {
		t.Fatalf("after: %q %v", id, ok)
	}
	if id, ok := next(time.Second); ok {
		t.Fatalf("delivered %s once more", id)
	}
}
