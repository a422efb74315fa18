package projections_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/natsx"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/projections"
)

// TestHubFollowsEventsOnlyWhileWaited: the consumer of ORDER_EVENTS starts
// with the first order waiter, wakes it when the order's event is stored, and
// stops once no waiter is left for the idle time.
func TestHubFollowsEventsOnlyWhileWaited(t *testing.T) {
	t.Parallel()
	js := orderlytest.JetStream(t, natsx.Fsync{Interval: time.Second})
	ctx := context.Background()
	store, err := projections.OpenStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := projections.NewHub(store, projections.HubConfig{EventsIdle: 200 * time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Stop)
	if hub.EventsFollowed() {
		t.Fatal("following events before anyone waits")
	}
	id := events.OrderID(7, "N0NCE0000000A")
	sub := hub.WatchOrder(id)
	if !hub.EventsFollowed() {
		t.Fatal("not following events while an order is waited for")
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: events.EventSubject(events.KindCreated, id), Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the order's event")
	}
	sub.Close()
	orderlytest.Eventually(t, 5*time.Second, "the events consumer to stop when idle", func() bool { return !hub.EventsFollowed() })
}
