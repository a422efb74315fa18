package bench_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsd "github.com/nats-io/nats-server/v2/server"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/internal/bench"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

func TestParseMix(t *testing.T) {
	t.Parallel()
	m, err := bench.ParseMix("new:70,replay:20,dup:10")
	if err != nil || m != (bench.Mix{New: 70, Replay: 20, Duplicate: 10}) {
		t.Fatalf("%+v %v", m, err)
	}
	if m, err := bench.ParseMix("new:90,duplicate:10"); err != nil || m != (bench.Mix{New: 90, Duplicate: 10}) {
		t.Errorf("duplicate:10: %+v %v", m, err)
	}
	for _, bad := range []string{"new:50", "new:100,old:0", "new:x", "new:-1,replay:101"} {
		if _, err := bench.ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
	// A kind given twice was taken at its last value, and the sum told
	// wrong ("new:100,new:0": "add up to 0").
	for _, twice := range []string{"new:100,new:0", "new:50,dup:25,duplicate:25"} {
		if _, err := bench.ParseMix(twice); err == nil || !strings.Contains(err.Error(), "given more than once") {
			t.Errorf("ParseMix(%q): %v, want a refusal naming the kind given twice", twice, err)
		}
	}
}

func TestBodyIsAValidOrderOfTheSize(t *testing.T) {
	t.Parallel()
	for _, size := range []int{200, 500, 5000} {
		b := bench.Body(size)
		if len(b) < size-60 || len(b) > size+60 {
			t.Errorf("Body(%d) is %d bytes", size, len(b))
		}
		req, errs := api.DecodeOrder(b)
		if errs != nil {
			t.Fatalf("Body(%d) does not decode: %v", size, errs)
		}
		if sum, _ := req.Sum(); req.Total == nil || *req.Total != sum {
			t.Fatalf("Body(%d): total %v, sum %d", size, req.Total, sum)
		}
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p := bench.PercentilesOf(d)
	if p.P50 != 50 || p.P99 != 99 || p.Max != 100 {
		t.Fatalf("%+v", p)
	}
}

// TestRunAgainstOrderly loads a real orderly briefly with every kind of request,
// and the ceiling handler with new ones.
func TestRunAgainstOrderly(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	res, err := bench.Run(context.Background(), "t", bench.Config{
		URL: inst.URL, Connections: 4, Requests: 1500, PayloadSize: 500, ReplayKeys: 20, // enough CPU for a figure (minCPUSample)
		Mix: bench.Mix{New: 50, Replay: 30, Duplicate: 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 1500 || res.Errors != 0 || res.Status["201"]+res.Status["409"] != 1500 || res.Kinds["replay"] == 0 || res.Kinds["dup"] == 0 {
		t.Fatalf("%+v", res)
	}
	if res.ServerCPUPerRequest <= 0 {
		t.Fatal("no server CPU per request from /metrics")
	}
	if err := bench.WaitIdle(context.Background(), inst.NATSURL(), inst.Operator(), 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}

	ceiling := httptest.NewServer(bench.BaselineHandler())
	defer ceiling.Close()
	cres, err := bench.Run(context.Background(), "ceiling", bench.Config{
		URL: ceiling.URL, Connections: 4, Requests: 200, PayloadSize: 500, Mix: bench.Mix{New: 100},
	})
	if err != nil || cres.Status["201"] != 200 {
		t.Fatalf("ceiling: %+v %v", cres, err)
	}
	r, err := http.Post(ceiling.URL+"/v1/orders", "application/json", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusBadRequest {
		t.Fatalf("the ceiling accepted a request without a key: %d", r.StatusCode)
	}
}

// TestBaselineChecksNATSBeforeTheLoad: --baseline needs orderly's NATS after
// each load (the backlog, the publish rate); without it the run must fail
// before it loads anything, not after a round of load thrown away.
func TestBaselineChecksNATSBeforeTheLoad(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := orderlyStandIn(&requests)
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	noNATS := "nats://" + l.Addr().String()
	l.Close() // nothing listens there any more

	_, err = bench.Compare(context.Background(), bench.CompareConfig{
		Load: bench.Config{URL: srv.URL, Connections: 2, Duration: time.Second, PayloadSize: 500, Mix: bench.Mix{New: 100}},
		Name: "t", Baseline: true, Rounds: 3, NATSURL: noNATS, Progress: io.Discard,
	})
	if err == nil || !strings.Contains(err.Error(), "--baseline") || !strings.Contains(err.Error(), "--nats-url") {
		t.Fatalf("want an error naming --baseline and --nats-url, got %v", err)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests were sent before the check failed", n)
	}
}

// TestBaselineFindsOrderlysConsumer: a NATS that answers but is not
// orderly's (no processor consumer) is refused before the load too.
func TestBaselineFindsOrderlysConsumer(t *testing.T) {
	t.Parallel()
	ns, err := natsd.NewServer(&natsd.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	var requests atomic.Int64
	srv := orderlyStandIn(&requests)
	defer srv.Close()
	_, err = bench.Compare(context.Background(), bench.CompareConfig{
		Load: bench.Config{URL: srv.URL, Connections: 2, Duration: time.Second, PayloadSize: 500, Mix: bench.Mix{New: 100}},
		Name: "t", Baseline: true, NATSURL: ns.ClientURL(), Progress: io.Discard,
	})
	if err == nil || !strings.Contains(err.Error(), jsstore.ProcessorConsumer) {
		t.Fatalf("want an error naming the consumer, got %v", err)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests were sent before the check failed", n)
	}
}

// TestBaselineNamesAUserWithoutRights: a user that may not read orderly's
// consumer is refused before the load, with the permissions violation named
// (the server's refusal reaches the request as a timeout only).
func TestBaselineNamesAUserWithoutRights(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	natsURL, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	orderlytest.Setup(t, natsURL, creds, 0)
	var requests atomic.Int64
	srv := orderlyStandIn(&requests)
	defer srv.Close()
	_, err := bench.Compare(context.Background(), bench.CompareConfig{
		Load: bench.Config{URL: srv.URL, Connections: 2, Duration: time.Second, PayloadSize: 500, Mix: bench.Mix{New: 100}},
		Name: "t", Baseline: true, NATSURL: natsURL, Progress: io.Discard,
		Credentials: jsstore.Credentials{NkeyFile: creds.SeedPath(natsauth.Events), InboxPrefix: natsauth.InboxPrefix(natsauth.Events)},
	})
	if err == nil || !strings.Contains(err.Error(), "the NATS user may not do this (nats: permissions violation") {
		t.Fatalf("want an error naming the permissions violation, got %v", err)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests were sent before the check failed", n)
	}
}

// orderlyStandIn answers /healthz and counts the orders it is sent.
func orderlyStandIn(orders *atomic.Int64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/orders" {
			return
		}
		orders.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
}

// pollStandIn accepts every order with 202 and Retry-After: 2, and shows it
// pending on its first GET (Retry-After: 1), created on the next.
func pollStandIn(gets *atomic.Int64) *httptest.Server {
	var seen sync.Map
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/orders":
			w.Header().Set("Location", "/v1/orders/"+url.PathEscape(r.Header.Get("Idempotency-Key")))
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"x","status":"pending"}`))
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/orders/"):
			gets.Add(1)
			if _, again := seen.LoadOrStore(r.URL.Path, true); !again {
				w.Header().Set("Retry-After", "1")
				_, _ = w.Write([]byte(`{"id":"x","status":"pending"}`))
				return
			}
			_, _ = w.Write([]byte(`{"id":"x","status":"created"}`))
		}
	}))
}

// TestPollingClientsHonourRetryAfter: with Poll, each 202 is followed until
// its order is seen decided, asking again when Retry-After says (or every
// PollEvery), the last ones after the run.
func TestPollingClientsHonourRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		every    time.Duration
		min, max time.Duration // when an order is seen decided: after two waits
	}{{0, 3 * time.Second, 4500 * time.Millisecond}, {100 * time.Millisecond, 200 * time.Millisecond, 1500 * time.Millisecond}} {
		var gets atomic.Int64
		srv := pollStandIn(&gets)
		res, err := bench.Run(context.Background(), "t", bench.Config{
			URL: srv.URL, Connections: 2, Requests: 20, PayloadSize: 500, Mix: bench.Mix{New: 100}, Async: true,
			Poll: true, PollEvery: c.every,
		})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		p := res.Polls
		if p == nil || p.Orders != 20 || p.Decided != 20 || p.Polls != 40 || p.PerOrder != 2 || p.Errors != 0 || gets.Load() != 40 {
			t.Fatalf("every %s: %+v, %d GETs; want 20 orders each polled twice", c.every, p, gets.Load())
		}
		seen := time.Duration(p.SeenDecided.P50 * float64(time.Millisecond))
		if seen < c.min || time.Duration(p.SeenDecided.Max*float64(time.Millisecond)) > c.max {
			t.Fatalf("every %s: seen decided %+v, want from %s to %s", c.every, p.SeenDecided, c.min, c.max)
		}
	}
}

// TestPollingClientsAgainstOrderly: against a real orderly, every 202 the
// clients follow is seen decided.
func TestPollingClientsAgainstOrderly(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	res, err := bench.Run(context.Background(), "t", bench.Config{
		URL: inst.URL, Connections: 4, Requests: 200, PayloadSize: 500, Mix: bench.Mix{New: 100}, Async: true, Poll: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Polls
	if res.Status["202"] != 200 || p == nil || p.Orders != 200 || p.Decided != 200 || p.Polls < 200 || p.Errors != 0 {
		t.Fatalf("%+v %+v", res, p)
	}
}

// TestPollConfigIsChecked: a poll interval without polling clients, or a
// negative one, is refused with a reason.
func TestPollConfigIsChecked(t *testing.T) {
	t.Parallel()
	ok := bench.Config{URL: "http://127.0.0.1:1", Connections: 1, Duration: time.Second, PayloadSize: 500, Mix: bench.Mix{New: 100}}
	for _, c := range []struct {
		name string
		edit func(*bench.Config)
		want string
	}{
		{"interval without --poll", func(c *bench.Config) { c.PollEvery = time.Second }, "needs polling clients (--poll)"},
		{"negative interval", func(c *bench.Config) { c.Poll, c.PollEvery = true, -time.Second }, "must not be negative"},
		{"negative drain", func(c *bench.Config) { c.Poll, c.PollDrain = true, -time.Second }, "must not be negative"},
	} {
		cfg := ok
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	ok.Poll, ok.PollEvery = true, time.Second
	if err := ok.Validate(); err != nil {
		t.Fatalf("polling every second: %v", err)
	}
}

// TestProgressIntervalIsChecked: a progress interval below 10 ms (a line
// per handful of requests) or a negative one is refused with a reason; 0
// is the default.
func TestProgressIntervalIsChecked(t *testing.T) {
	t.Parallel()
	ok := bench.Config{URL: "http://127.0.0.1:1", Connections: 1, Duration: time.Second, PayloadSize: 500, Mix: bench.Mix{New: 100}}
	for _, d := range []time.Duration{-time.Second, time.Millisecond} {
		cfg := ok
		cfg.ProgressEvery = d
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--progress-every") {
			t.Errorf("progress every %s: %v, want an error naming --progress-every", d, err)
		}
	}
	for _, d := range []time.Duration{0, 10 * time.Millisecond, 250 * time.Millisecond} {
		cfg := ok
		cfg.ProgressEvery = d
		if err := cfg.Validate(); err != nil {
			t.Errorf("progress every %s: %v", d, err)
		}
	}
}
