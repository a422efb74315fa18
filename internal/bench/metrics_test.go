package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestServerMetricsCountBothProcesses: orderly serve's embedded NATS server
// runs in a child process whose CPU and memory are reported beside
// orderly's own; the server's figures are their sum.
func TestServerMetricsCountBothProcesses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 2.5
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1e+08
# TYPE orderly_nats_server_process_cpu_seconds_total counter
orderly_nats_server_process_cpu_seconds_total 1.5
# TYPE orderly_nats_server_process_resident_memory_bytes gauge
orderly_nats_server_process_resident_memory_bytes 3e+08
`))
	}))
	defer srv.Close()
	m, err := readMetrics(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUSeconds != 4 || m.RSSBytes != 4e8 {
		t.Fatalf("cpu %v s, rss %v B; want 4 s and 4e8 B", m.CPUSeconds, m.RSSBytes)
	}
}
