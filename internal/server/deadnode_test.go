package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestNodeThatStopsAnsweringIsLeft: the NATS node an API is connected to
// hangs (its process stopped with SIGSTOP, as a frozen host, or one whose
// network drops every byte): nothing closes the API's connection, and
// nothing comes back on it. The API pings its node every second; after 5 s
// without an answer it moves to another node of the cluster (its server pool
// has the nodes the cluster told it of), failing at once the requests still
// waiting on the old connection, and is ready and takes orders again within
// 20 s (measured: 7 s). Leaving it to nats.go's reconnect after its own pings
// (5 s apart here) took 25 s: the remaking of the API's feed waited 10 s for
// an attempt sent to the hung node. With nats.go's default pings (2 minutes
// apart, stale after the third) it waited 4 to 6 minutes.
func TestNodeThatStopsAnsweringIsLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster and 30 s of waiting; run without -short")
	}
	t.Parallel()
	cluster := orderlytest.StartProcessCluster(t, orderlytest.ClusterPorts(t, 3))
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	const hung = 0
	cfg := orderlytest.Config(t)
	orderlytest.Attach(&cfg, cluster.NodeURL(hung), cluster.Creds, natsauth.Serve)
	api := orderlytest.Start(t, cfg)
	if r := api.PostOrder(t, "before", orderlytest.Order("c-1")); r.Status != http.StatusCreated {
		t.Fatalf("before: %d %s", r.Status, r.Body)
	}

	ready := watchReadiness(api.URL)
	at := time.Now()
	cluster.Freeze(hung)
	var back time.Time
	for deadline := at.Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		samples := ready.sofar()
		if notReady, ok := firstAfter(samples, at, false); ok {
			if b, ok := firstAfter(samples, notReady, true); ok {
				back = b
				break
			}
		}
	}
	ready.end()
	if back.IsZero() {
		t.Fatal("the API was not ready again within 60 s of its node hanging")
	}
	if back.Sub(at) > 20*time.Second {
		t.Fatalf("the API was ready again %s after its node hung, more than 20 s", back.Sub(at).Round(100*time.Millisecond))
	}
	t.Logf("the API ready again %s after its node hung", back.Sub(at).Round(100*time.Millisecond))
	// Ready is the API's own state: its connection and feeds. The order's
	// decision also waits for the processor's consumer, whose leader may have
	// been on the hung node (an election takes 4 to 9 s after the last
	// heartbeat), so the order may wait longer than the default 2 s.
	if r := api.PostOrder(t, "after", orderlytest.Order("c-1"), "Prefer: wait=20"); r.Status != http.StatusCreated {
		t.Fatalf("after: %d %s", r.Status, r.Body)
	}
	if d := time.Since(at); d > 30*time.Second {
		t.Fatalf("an order taken %s after its node hung, more than 30 s", d.Round(100*time.Millisecond))
	} else {
		t.Logf("an order taken %s after its node hung", d.Round(100*time.Millisecond))
	}
	// The watch moved it (after 5 s of unanswered pings), before nats.go's
	// own pings would have (10 to 15 s).
	if n := api.Metric(t, "orderly_nats_node_moves_total"); n < 1 {
		t.Errorf("orderly_nats_node_moves_total %v", n)
	}
	if n := api.Metric(t, "orderly_nats_reconnects_total"); n < 1 {
		t.Errorf("orderly_nats_reconnects_total %v", n)
	}
	cluster.Thaw(hung) // for a quick end: the API's shutdown does not wait on the hung node
}
