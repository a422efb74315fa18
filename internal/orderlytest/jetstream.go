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
	c := StartCluster(tb, ports)
	return c.URLs(), c.Stop
}

// TestCluster is a running embedded cluster whose nodes can be stopped and
// started again on their data.
type TestCluster struct {
	tb    testing.TB
	ports Ports
	cfgs  []natsserver.Config
	mu    sync.Mutex
	nodes []*server.Server
}

// StartCluster starts an embedded cluster on ports; it stops when the test ends.
func StartCluster(tb testing.TB, ports Ports) *TestCluster {
	tb.Helper()
	n := len(ports.Client)
	c := &TestCluster{tb: tb, ports: ports, cfgs: make([]natsserver.Config, n), nodes: make([]*server.Server, n)}
	for i := 0; i < n; i++ {
		var routes []string
		for j := 0; j < n; j++ {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports.Route[j]))
			}
		}
		c.cfgs[i] = natsserver.Config{
			ServerName: NodeName(i), StoreDir: tb.TempDir(),
			Listen: fmt.Sprintf("127.0.0.1:%d", ports.Client[i]), Fsync: natsserver.Fsync{Interval: time.Second},
			Cluster: &natsserver.ClusterConfig{Name: "orderly-test", Listen: fmt.Sprintf("127.0.0.1:%d", ports.Route[i]), Routes: routes},
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { // all at once: JetStream needs a quorum before any node is ready
			defer wg.Done()
			c.nodes[i], errs[i] = natsserver.Start(context.Background(), c.cfgs[i])
		}()
	}
	wg.Wait()
	tb.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("cluster node %d: %v", i, err)
		}
	}
	return c
}

// NodeName is the server name of node i.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// URLs are the nodes' client URLs, comma-separated.
func (c *TestCluster) URLs() string { return c.ports.URLs() }

// Stop shuts node i down (again is a no-op).
func (c *TestCluster) Stop(i int) {
	c.mu.Lock()
	ns := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart starts node i again on its data; it returns once the node accepts
// connections (it catches up with the cluster on its own).
func (c *TestCluster) Restart(i int) {
	c.tb.Helper()
	opts, err := natsserver.Options(c.cfgs[i])
	if err != nil {
		c.tb.Fatal(err)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		c.tb.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		c.tb.Fatalf("node %d did not come back", i)
	}
	c.mu.Lock()
	c.nodes[i] = ns
	c.mu.Unlock()
}

// Index is the node index of a server name, -1 for none.
func (c *TestCluster) Index(serverName string) int {
	for i := range c.cfgs {
		if c.cfgs[i].ServerName == serverName {
			return i
		}
	}
	return -1
}
