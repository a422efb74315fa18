package orderlytest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is an in-process toxiproxy in front of a TCP address, for network
// faults between a role and NATS.
type Proxy struct {
	p *toxiproxy.Proxy
}

// NewProxy starts a proxy to upstream (host:port); it stops when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	p := toxiproxy.NewProxy(srv, "nats", "127.0.0.1:0", strings.TrimPrefix(upstream, "nats://"))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{p: p}
}

// URL is the proxy's NATS URL.
func (p *Proxy) URL() string { return "nats://" + p.p.Listen }

// Add adds a toxic: typ is latency, timeout, reset_peer, ...; stream is
// upstream (to NATS) or downstream (from NATS).
func (p *Proxy) Add(t testing.TB, name, typ, stream string, attrs map[string]any) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "attributes": attrs})
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
		t.Fatalf("toxic %s: %v", name, err)
	}
}

// Remove removes a toxic.
func (p *Proxy) Remove(t testing.TB, name string) {
	t.Helper()
	if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("remove toxic %s: %v", name, err)
	}
}
