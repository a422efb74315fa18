package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// TestServerMetricsAreBounded: the URL benchmarked may answer /metrics
// without end; the bench reads at most maxMetrics of it. Before, it parsed
// whatever came (here 64 MiB of comment lines, allocating as much again).
func TestServerMetricsAreBounded(t *testing.T) {
	// Not parallel: the allocations counted are the process's.
	line := []byte("# " + strings.Repeat("x", 1021) + "\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for range 64 << 10 {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readMetrics(context.Background(), srv.Client(), srv.URL)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "/metrics: more than 8388608 bytes") {
		t.Fatalf("an endless /metrics: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 48<<20 {
		t.Fatalf("reading /metrics allocated %d MiB", alloc>>20)
	}
}

// TestWaitersAnswersAreBounded: bench --waiters decodes each long poll's
// answer, and the URL may answer without end; at most maxAnswer of each is
// read, and an answer that is not an order's JSON counts as an error (it
// counted as a decided order, which ended the run with advice to run the
// server with --roles api,projector).
func TestWaitersAnswersAreBounded(t *testing.T) {
	// Not parallel: the allocations counted are the process's.
	const polls = 4
	var started atomic.Int64
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost:
			w.Header().Set("Location", "/v1/orders/ord_1")
			w.WriteHeader(http.StatusAccepted)
		case r.URL.Path == "/metrics":
			fmt.Fprintf(w, "# TYPE orderly_waiters gauge\norderly_waiters %d\n", started.Load())
		default: // a long poll: a string 32 MiB long
			started.Add(1)
			_, _ = w.Write([]byte(`{"status":"`))
			for range 512 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
	}))
	defer srv.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := Waiters(context.Background(), WaitersConfig{URL: srv.URL, Count: polls, Hold: 10 * time.Second}, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("waiters: %v", err)
	}
	if res.Waiters != polls || res.Errors != polls {
		t.Fatalf("%d long polls waiting and %d errors, want %d and %d", res.Waiters, res.Errors, polls, polls)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 24<<20 {
		t.Fatalf("reading %d endless answers allocated %d MiB", polls, alloc>>20)
	}
}

// TestPollAnswersAreBounded: a poll's answer longer than maxAnswer is an
// error, not an order. Before, it was cut at 1 MiB and, holding no
// "pending", counted as a decided order.
func TestPollAnswersAreBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), maxAnswer+1))
	}))
	defer srv.Close()
	r := &run{cfg: Config{URL: srv.URL}, client: srv.Client()}
	status, _, body, err := r.get(context.Background(), "/v1/orders/ord_1")
	if status != http.StatusOK || body != nil || err == nil || err.Error() != "more than 1048576 bytes" {
		t.Fatalf("an answer of %d bytes: status %d, %d bytes, %v", maxAnswer+1, status, len(body), err)
	}
}

// TestCPUPerRequestNeedsEnoughCPU: the counter moves in clock ticks, so a
// run of one request was said to cost 10,000 µs (one tick); a figure is
// made from a fifth of a second of CPU or more only.
func TestCPUPerRequestNeedsEnoughCPU(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cpu0, cpu1 float64
		requests   int
		want       float64
	}{
		{2.5, 2.51, 1, 0},      // one tick
		{2.5, 2.69, 1000, 0},   // under a fifth of a second
		{2.5, 3.5, 10000, 100}, // 1 s for 10,000
		{0, 3.5, 10000, 0},     // no first reading
		{2.5, 3.5, 0, 0},
	} {
		if got := cpuPerRequest(c.cpu0, c.cpu1, c.requests); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("cpuPerRequest(%v, %v, %d) = %v, want %v", c.cpu0, c.cpu1, c.requests, got, c.want)
		}
	}
}
