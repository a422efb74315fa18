package orderlytest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsserver"
)

// JetStream starts an in-process embedded server with orderly's topology for a
// test or benchmark, and returns a JetStream context on it. Everything stops
// when the test ends.
func JetStream(tb testing.TB, fsync natsserver.Fsync) jetstream.JetStream {
	tb.Helper()
	return JetStreamWith(tb, fsync, jsstore.DefaultTopology())
}

// JetStreamWith is JetStream with the given topology.
func JetStreamWith(tb testing.TB, fsync natsserver.Fsync, topology jsstore.Topology) jetstream.JetStream {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := natsserver.Start(ctx, natsserver.Config{ServerName: "test", StoreDir: tb.TempDir(), Fsync: fsync})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := topology.Ensure(ctx, js, nil); err != nil {
		tb.Fatal(err)
	}
	return js
}

// Cluster starts an n-node embedded NATS cluster with JetStream (each node
// with its own store, client port and route port) and returns the client URLs,
// comma-separated. stop(i) shuts node i down; everything stops when the test ends.
func Cluster(tb testing.TB, n int) (urls string, stop func(i int)) {
	tb.Helper()
	return ClusterAt(tb, ClusterPorts(tb, n))
}

// Ports are the client and route ports of a cluster's nodes.
type Ports struct{ Client, Route []int }

// ClusterPorts picks free ports for an n-node cluster.
func ClusterPorts(tb testing.TB, n int) Ports {
	p := Ports{Client: make([]int, n), Route: make([]int, n)}
	for i := range p.Client {
		p.Client[i], p.Route[i] = FreePort(tb), FreePort(tb)
	}
	return p
}

// URLs are the client URLs of the ports, comma-separated.
func (p Ports) URLs() string {
	list := make([]string, len(p.Client))
	for i, port := range p.Client {
		list[i] = fmt.Sprintf("nats://127.0.0.1:%d", port)
	}
	return strings.Join(list, ",")
}

// ClusterAt is Cluster on the given ports.
func ClusterAt(tb testing.TB, ports Ports) (urls string, stop func(i int)) {
	tb.Helper()
	n := len(ports.Client)
	clientPorts, routePorts := ports.Client, ports.Route
	nodes := make([]*server.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		var routes []string
		for j := 0; j < n; j++ {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", routePorts[j]))
			}
		}
		cfg := natsserver.Config{
			ServerName: fmt.Sprintf("node-%d", i), StoreDir: tb.TempDir(),
			Listen: fmt.Sprintf("127.0.0.1:%d", clientPorts[i]), Fsync: natsserver.Fsync{Interval: time.Second},
			Cluster: &natsserver.ClusterConfig{Name: "orderly-test", Listen: fmt.Sprintf("127.0.0.1:%d", routePorts[i]), Routes: routes},
		}
		wg.Add(1)
		go func() { // all at once: JetStream needs a quorum before any node is ready
			defer wg.Done()
			nodes[i], errs[i] = natsserver.Start(context.Background(), cfg)
		}()
	}
	wg.Wait()
	var once sync.Map
	stop = func(i int) {
		if _, done := once.LoadOrStore(i, true); !done && nodes[i] != nil {
			nodes[i].Shutdown()
			nodes[i].WaitForShutdown()
		}
	}
	tb.Cleanup(func() {
		for i := range nodes {
			stop(i)
		}
	})
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("cluster node %d: %v", i, err)
		}
	}
	return ports.URLs(), stop
}
