package jsstore_test

import (
	"context"
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
