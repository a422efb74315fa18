package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly-dev/orderly/internal/readlimit"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// WaitersConfig configures the long-poll measurement.
type WaitersConfig struct {
	// URL is the base URL of an orderly API whose orders stay pending (run it
	// with --roles api,projector).
	URL string
	// Count is how many long polls to hold at once.
	Count int
	// Hold is the wait each long poll asks for (capped by the server's --max-wait).
	Hold time.Duration // at least twice the time it takes to connect them all
	// Token is sent as Authorization: Bearer when not empty.
	Token string
}

// ServerMetrics are the server's own figures, read from /metrics.
//
// RSSBytes and CPUSeconds are of every process the target reports: orderly's
// own (process_*) and, under orderly serve, its embedded NATS server's child
// process (orderly_nats_server_process_*).
type ServerMetrics struct {
	RSSBytes       float64 `json:"rss_bytes"`
	HeapInuseBytes float64 `json:"heap_inuse_bytes"`
	Goroutines     float64 `json:"goroutines"`
	Waiters        float64 `json:"waiters"`
	CPUSeconds     float64 `json:"cpu_seconds"`
}

// WaitersResult is what holding Count long polls cost the server.
type WaitersResult struct {
	Waiters          int           `json:"waiters"`
	Before           ServerMetrics `json:"before"`
	During           ServerMetrics `json:"during"`
	RSSPerWaiter     float64       `json:"rss_bytes_per_waiter"`
	HeapPerWaiter    float64       `json:"heap_bytes_per_waiter"`
	GoroutinesPer    float64       `json:"goroutines_per_waiter"`
	SecondsToConnect float64       `json:"seconds_to_connect"`
	Errors           int           `json:"errors"`
}

// Waiters opens cfg.Count long polls (GET /v1/orders/{id}?wait=) on one pending
// order, and reads the server's memory before and while they wait.
func Waiters(ctx context.Context, cfg WaitersConfig, progress io.Writer) (WaitersResult, error) {
	client := NewClient(cfg.Count)
	client.Timeout = 0 // the long polls outlast any fixed client timeout; hctx ends them
	defer client.CloseIdleConnections()
	mclient := NewClient(2) // the long polls take every connection of the other
	defer mclient.CloseIdleConnections()
	do := func(ctx context.Context, method, path, key string, body []byte) (*http.Response, error) {
		var rd io.Reader
		if body != nil {
			rd = strings.NewReader(string(body))
		}
		req, err := http.NewRequestWithContext(ctx, method, cfg.URL+path, rd)
		if err != nil {
			return nil, err
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Prefer", "respond-async")
		}
		if cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+cfg.Token)
		}
		return client.Do(req)
	}
	resp, err := do(ctx, http.MethodPost, "/v1/orders", fmt.Sprintf("waiters-%d", time.Now().UnixNano()), Body(500))
	if err != nil {
		return WaitersResult{}, err
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc == "" {
		return WaitersResult{}, fmt.Errorf("creating the pending order: status %d", resp.StatusCode)
	}
	before, err := readMetrics(ctx, mclient, cfg.URL)
	if err != nil {
		return WaitersResult{}, err
	}

	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errs, decided atomic.Int64
	start := time.Now()
	for i := 0; i < cfg.Count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := do(hctx, http.MethodGet, fmt.Sprintf("%s?wait=%ds", loc, int(cfg.Hold.Seconds())), "", nil)
			if err != nil {
				if hctx.Err() == nil {
					errs.Add(1)
				}
				return
			}
			// The URL may answer anything: at most maxAnswer of it is read,
			// and an answer that is not an order's JSON is an error, not a
			// decided order.
			var v struct{ Status string }
			b, err := readlimit.ReadAll(resp.Body, maxAnswer)
			resp.Body.Close()
			if err == nil {
				err = json.Unmarshal(b, &v)
			}
			switch {
			case err != nil:
				if hctx.Err() == nil {
					errs.Add(1)
				}
			case v.Status != "pending":
				decided.Add(1)
			}
		}()
	}
	res := WaitersResult{Waiters: cfg.Count, Before: before}
	deadline := time.Now().Add(cfg.Hold / 2)
	best, bestAt := 0.0, time.Now()
	for {
		m, err := readMetrics(ctx, mclient, cfg.URL)
		if err != nil {
			return res, err
		}
		if progress != nil {
			fmt.Fprintf(progress, "\r  %6.0f of %d long polls waiting", m.Waiters-before.Waiters, cfg.Count)
		}
		if decided.Load() > 0 {
			return res, errors.New("the order was decided while the long polls waited: run the server with --roles api,projector")
		}
		waiting := m.Waiters - before.Waiters
		if waiting > best {
			best, bestAt = waiting, time.Now()
		}
		// All waiting, or nearly all and no more coming (a few connections may
		// still be in TCP retransmission): measure with those that wait.
		if int(waiting) >= cfg.Count || (waiting >= 0.99*float64(cfg.Count) && time.Since(bestAt) > 3*time.Second) {
			res.SecondsToConnect = time.Since(start).Seconds()
			time.Sleep(time.Second) // let the server settle
			if res.During, err = readMetrics(ctx, mclient, cfg.URL); err != nil {
				return res, err
			}
			res.Waiters = int(res.During.Waiters - before.Waiters)
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %.0f of %d long polls were waiting after %s (errors: %d; is ulimit -n high enough?)",
				m.Waiters-before.Waiters, cfg.Count, cfg.Hold, errs.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if progress != nil {
		fmt.Fprintln(progress)
	}
	cancel()
	wg.Wait()
	n := float64(res.Waiters)
	res.RSSPerWaiter = (res.During.RSSBytes - before.RSSBytes) / n
	res.HeapPerWaiter = (res.During.HeapInuseBytes - before.HeapInuseBytes) / n
	res.GoroutinesPer = (res.During.Goroutines - before.Goroutines) / n
	res.Errors = int(errs.Load())
	return res, nil
}

// maxAnswer bounds what the bench reads of an order's answer to a poll or a
// long poll (an order's JSON: a few kilobytes at most).
const maxAnswer = 1 << 20

// maxMetrics bounds the /metrics page readMetrics reads.
const maxMetrics = 8 << 20

func readMetrics(ctx context.Context, client *http.Client, url string) (ServerMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return ServerMetrics{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return ServerMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// orderly serves /metrics to its own host, or with its metrics token.
		return ServerMetrics{}, fmt.Errorf("/metrics: %s: run the bench on orderly's host", resp.Status)
	}
	// The URL benchmarked may be anything: its /metrics is read only up
	// to maxMetrics (orderly's are some tens of kilobytes).
	b, err := readlimit.ReadAll(resp.Body, maxMetrics)
	if err != nil {
		return ServerMetrics{}, fmt.Errorf("/metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return ServerMetrics{}, fmt.Errorf("/metrics: %w", err)
	}
	get := func(name string) float64 {
		f, ok := fams[name]
		if !ok || len(f.Metric) == 0 {
			return 0
		}
		m := f.Metric[0]
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
		return 0
	}
	return ServerMetrics{
		RSSBytes:       get("process_resident_memory_bytes") + get(childProcess+"resident_memory_bytes"),
		HeapInuseBytes: get("go_memstats_heap_inuse_bytes"),
		Goroutines:     get("go_goroutines"),
		Waiters:        get("orderly_waiters"),
		CPUSeconds:     get("process_cpu_seconds_total") + get(childProcess+"cpu_seconds_total"),
	}, nil
}

// childProcess prefixes the process metrics of orderly serve's embedded NATS
// server, which runs in a child process (docs/adr/0014).
const childProcess = "orderly_nats_server_process_"
