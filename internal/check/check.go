// Package check is the workload generator and checker behind `orderly check`:
// many clients send orders the way real clients fail (immediate and delayed
// retries, bursts of one key, retries with a changed payload, sync and async
// clients, clients that drop the connection before the answer), and afterwards
// the checker verifies, from the API and from ORDER_EVENTS, that nothing was
// lost or duplicated.
package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/bench"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/readlimit"
)

// Scenario is how a logical order's client behaves.
type Scenario string

// The scenarios.
const (
	// Sync: POST and wait for the decision, then retry at once (a replay).
	Sync Scenario = "sync"
	// Async: POST with Prefer: respond-async, poll the order, then retry.
	Async Scenario = "async"
	// Burst: five concurrent POSTs of one key, then one more.
	Burst Scenario = "burst"
	// Delayed: POST, wait longer than the duplicate window, retry.
	Delayed Scenario = "delayed"
	// Changed: POST, then the same key with another payload (must get 422).
	Changed Scenario = "changed"
	// Drop: POST and hang up before the answer, then retry.
	Drop Scenario = "drop"
	// Reject: an order the processor rejects (wrong total), then a retry.
	Reject Scenario = "reject"
)

// Scenarios lists every scenario.
var Scenarios = []Scenario{Sync, Async, Burst, Delayed, Changed, Drop, Reject}

// Config configures a check run.
type Config struct {
	// URLs are the orderly APIs: the requests go to each in turn, as a
	// load balancer would send them, so a retry may reach another API than
	// the attempt before it. NATSURL is their NATS, for reading
	// ORDER_EVENTS, with NATSCredentials.
	URLs            []string
	NATSURL         string
	NATSCredentials jsstore.Credentials
	// Tenant is the tenant of Token (keys are scoped by it); "default" without tokens.
	Tenant, Token string
	// Clients is the number of concurrent clients.
	Clients int
	// Duration of the workload; Orders, when > 0, stops it after that many logical orders.
	Duration time.Duration
	Orders   int
	// RetryDelay is the wait of the delayed retries: longer than the server's
	// duplicate window. 0 leaves the delayed scenario out.
	RetryDelay time.Duration
	// Settle bounds how long the checker waits, after the workload, for clients
	// to get their answers and for accepted orders to be decided.
	Settle time.Duration
	// Weights of the scenarios (relative); missing ones are 0. Empty: all equal.
	Weights map[Scenario]int
	// RequestTimeout bounds each HTTP request.
	RequestTimeout time.Duration
	// Progress, when set, receives a progress bar.
	Progress io.Writer
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if len(c.URLs) == 0 {
		errs = append(errs, errors.New("--url: the URL of at least one API is needed"))
	}
	for _, u := range c.URLs {
		if err := bench.CheckURL(u); err != nil {
			errs = append(errs, err)
		}
	}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("--nats-url is needed to read ORDER_EVENTS"))
	}
	if c.Clients < 1 {
		errs = append(errs, fmt.Errorf("--clients must be at least 1, got %d", c.Clients))
	}
	if c.Orders < 0 {
		errs = append(errs, fmt.Errorf("--orders must not be negative, got %d", c.Orders))
	}
	if c.Duration <= 0 && c.Orders <= 0 {
		errs = append(errs, errors.New("give a --duration or a number of --orders (both are 0)"))
	}
	if c.Settle <= 0 {
		errs = append(errs, fmt.Errorf("--settle must be positive, got %s", c.Settle))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--request-timeout must be positive, got %s", c.RequestTimeout))
	}
	total := 0
	for _, s := range Scenarios {
		total += max(c.Weights[s], 0)
	}
	if len(c.Weights) > 0 && total == 0 { // it panicked picking a scenario
		errs = append(errs, fmt.Errorf("--mix: the weights of the scenarios add up to 0: give at least one of %v a weight above 0", Scenarios))
	}
	for s, w := range c.Weights {
		if w < 0 {
			errs = append(errs, fmt.Errorf("--mix: the weight of %s is negative (%d)", s, w))
		}
		if s == Delayed && w > 0 && c.RetryDelay <= 0 {
			errs = append(errs, errors.New("--mix: the delayed scenario needs a --retry-delay longer than the server's duplicate window"))
		}
	}
	return errors.Join(errs...)
}

// Attempt is one HTTP request of a logical order.
type Attempt struct {
	// API is the URL the request was sent to.
	API      string        `json:"api"`
	Status   int           `json:"status"` // 0: no answer
	Err      string        `json:"error,omitempty"`
	Dropped  bool          `json:"dropped,omitempty"`
	Changed  bool          `json:"changed,omitempty"`
	Replayed bool          `json:"replayed,omitempty"`
	Location string        `json:"location,omitempty"`
	Code     string        `json:"code,omitempty"`
	Latency  time.Duration `json:"latency_ns"`
	// Body is the answer's body, as received.
	Body string `json:"body,omitempty"`
	body []byte
}

// Order is one logical order: a key and what happened to it.
type Order struct {
	Key         string    `json:"key"`
	Scenario    Scenario  `json:"scenario"`
	Fingerprint string    `json:"-"`
	ChangedFP   string    `json:"-"`
	Attempts    []Attempt `json:"attempts"`
	// ReadBack is the status of the order read at its Location after the run.
	ReadBack string `json:"read_back,omitempty"`
	readBody []byte
	mu       sync.Mutex
}

func (o *Order) add(a Attempt) {
	o.mu.Lock()
	o.Attempts = append(o.Attempts, a)
	o.mu.Unlock()
}

// accepted reports whether any answer accepted the order (201, 202, 409, or a
// 422 order_rejected), and where it lives.
func (o *Order) accepted() (bool, string) {
	for _, a := range o.Attempts {
		if a.Changed {
			continue
		}
		if a.Status == http.StatusCreated || a.Status == http.StatusAccepted || a.Status == http.StatusConflict ||
			(a.Status == http.StatusUnprocessableEntity && a.Code == "order_rejected") {
			return true, a.Location
		}
	}
	return false, ""
}

type runner struct {
	cfg      Config
	client   *http.Client
	runID    string
	bodies   map[Scenario][]byte
	changed  []byte
	deadline time.Time // the end of the answers: workload end + settle
	orders   []*Order
	mu       sync.Mutex
	started  atomic.Int64
	sent     atomic.Uint64 // requests, for the next API in turn
}

// url is the API of the next request.
func (r *runner) url() string {
	return r.cfg.URLs[(r.sent.Add(1)-1)%uint64(len(r.cfg.URLs))]
}

// Run runs the workload and the checks.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tenant == "" {
		cfg.Tenant = api.DefaultTenant
	}
	if len(cfg.Weights) == 0 {
		cfg.Weights = map[Scenario]int{}
		for _, s := range Scenarios {
			if s != Delayed || cfg.RetryDelay > 0 {
				cfg.Weights[s] = 1
			}
		}
	}
	r := &runner{
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.RequestTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 4 * cfg.Clients}},
		runID:  strconv.FormatInt(time.Now().UnixNano(), 36),
	}
	customer := "check-" + r.runID
	r.bodies = map[Scenario][]byte{
		Reject: []byte(`{"customer_id":"` + customer + `","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}],"total":1}`),
	}
	ok := []byte(`{"customer_id":"` + customer + `","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}],"total":4990}`)
	for _, s := range Scenarios {
		if s != Reject {
			r.bodies[s] = ok
		}
	}
	r.changed = []byte(`{"customer_id":"` + customer + `","currency":"EUR","items":[{"sku":"SKU-2","quantity":1,"unit_price":100}]}`)

	if err := preflight(ctx, r.client, cfg); err != nil {
		return nil, err
	}
	start := time.Now()
	genEnd := start.Add(cfg.Duration)
	if cfg.Duration <= 0 {
		genEnd = start.Add(24 * time.Hour)
	}
	r.deadline = genEnd.Add(cfg.Settle)
	stopBar := r.progress(start, genEnd)
	var wg sync.WaitGroup
	for i := 0; i < cfg.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for ctx.Err() == nil && time.Now().Before(genEnd) {
				n := int(r.started.Add(1))
				if cfg.Orders > 0 && n > cfg.Orders {
					return
				}
				r.play(ctx, r.newOrder(n, r.pick(rng)))
			}
		}()
	}
	wg.Wait()
	stopBar()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.readBack(ctx)
	evs, err := readEventsPatiently(ctx, cfg, start.Add(-time.Minute), customer, cfg.Settle)
	if err != nil {
		return nil, fmt.Errorf("reading ORDER_EVENTS: %w", err)
	}
	return r.verify(evs, time.Since(start)), nil
}

func (r *runner) pick(rng *rand.Rand) Scenario {
	total := 0
	for _, s := range Scenarios {
		total += r.cfg.Weights[s]
	}
	n := rng.IntN(total)
	for _, s := range Scenarios {
		if n < r.cfg.Weights[s] {
			return s
		}
		n -= r.cfg.Weights[s]
	}
	return Sync
}

func (r *runner) newOrder(n int, s Scenario) *Order {
	o := &Order{Key: "check-" + r.runID + "-" + strconv.Itoa(n), Scenario: s}
	req, _ := api.DecodeOrder(r.bodies[s])
	o.Fingerprint = idempotency.Fingerprint(req)
	if s == Changed {
		creq, _ := api.DecodeOrder(r.changed)
		o.ChangedFP = idempotency.Fingerprint(creq)
	}
	r.mu.Lock()
	r.orders = append(r.orders, o)
	r.mu.Unlock()
	return o
}

// play runs one logical order's client.
func (r *runner) play(ctx context.Context, o *Order) {
	body := r.bodies[o.Scenario]
	switch o.Scenario {
	case Sync, Reject:
		r.untilFinal(ctx, o, body, "")
		r.untilFinal(ctx, o, body, "")
	case Async:
		a := r.untilDefinitive(ctx, o, body, "respond-async", false)
		if a.Location != "" {
			r.poll(ctx, o, a.Location)
		}
		r.untilFinal(ctx, o, body, "")
	case Burst:
		var wg sync.WaitGroup
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); r.untilDefinitive(ctx, o, body, "", false) }()
		}
		wg.Wait()
		r.untilFinal(ctx, o, body, "")
	case Delayed:
		r.untilFinal(ctx, o, body, "")
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.RetryDelay):
		}
		r.untilFinal(ctx, o, body, "")
	case Changed:
		r.untilFinal(ctx, o, body, "")
		r.untilDefinitive(ctx, o, r.changed, "", true)
	case Drop:
		r.post(ctx, o, body, "", false, true)
		r.untilFinal(ctx, o, body, "")
	}
}

// untilFinal retries until the decision (201 or 422), waiting for pending
// originals with Prefer: wait.
func (r *runner) untilFinal(ctx context.Context, o *Order, body []byte, prefer string) Attempt {
	for {
		a := r.untilDefinitive(ctx, o, body, prefer, false)
		if a.Status != http.StatusAccepted && a.Status != http.StatusConflict || time.Now().After(r.deadline) || ctx.Err() != nil {
			return a
		}
		prefer = "wait=5"
	}
}

// untilDefinitive sends until an answer that is not a transient failure
// (no answer, 503, 409 without a wait).
func (r *runner) untilDefinitive(ctx context.Context, o *Order, body []byte, prefer string, changed bool) Attempt {
	backoff := 50 * time.Millisecond
	for {
		a := r.post(ctx, o, body, prefer, changed, false)
		transient := a.Status == 0 || a.Status == http.StatusServiceUnavailable || (a.Status == http.StatusConflict && prefer == "")
		if !transient || time.Now().After(r.deadline) || ctx.Err() != nil {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// post sends one request and records it. drop hangs up as soon as the request
// is written.
func (r *runner) post(ctx context.Context, o *Order, body []byte, prefer string, changed, drop bool) Attempt {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if drop {
		rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
	}
	target := r.url()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, target+"/v1/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", o.Key)
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	t0 := time.Now()
	resp, err := r.client.Do(req)
	a := Attempt{API: target, Changed: changed, Dropped: drop}
	if err == nil {
		a.body, err = readResponse(resp)
	}
	a.Latency = time.Since(t0)
	if err != nil {
		if !drop {
			a.Err = err.Error()
		}
		o.add(a)
		return a
	}
	a.Status = resp.StatusCode
	a.Body = string(a.body)
	a.Location = resp.Header.Get("Location")
	a.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	if i := bytes.Index(a.body, []byte(`"code":"`)); i >= 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		rest := a.body[i+8:]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			a.Code = string(rest[:j])
		}
	}
	o.add(a)
	return a
}

// maxResponse bounds the body of an answer the checker reads: orderly's
// are a few kilobytes (an order of the largest body it takes, and its
// headers), and the URL checked may be anything.
const maxResponse = 1 << 20

// readResponse reads and closes resp's body, refusing one above maxResponse.
func readResponse(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	b, err := readlimit.ReadAll(resp.Body, maxResponse)
	if errors.Is(err, readlimit.ErrTooLarge) {
		err = fmt.Errorf("an answer of %w", err)
	}
	return b, err
}

// poll long-polls the order until it is decided or the deadline passes.
func (r *runner) poll(ctx context.Context, o *Order, loc string) (string, []byte) {
	for ctx.Err() == nil && time.Now().Before(r.deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url()+loc+"?wait=5s", nil)
		if r.cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
		}
		resp, err := r.client.Do(req)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		b, err := readResponse(resp)
		if err != nil || resp.StatusCode != http.StatusOK {
			if resp.StatusCode == http.StatusNotFound {
				return "not found", nil
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		switch {
		case bytes.Contains(b, []byte(`"status":"created"`)):
			return "created", b
		case bytes.Contains(b, []byte(`"status":"rejected"`)):
			return "rejected", b
		}
	}
	return "pending", nil
}

// readBack reads every accepted order at its Location.
func (r *runner) readBack(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, r.cfg.Clients)
	for _, o := range r.orders {
		ok, loc := o.accepted()
		if !ok || loc == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			o.ReadBack, o.readBody = r.poll(ctx, o, loc)
		}()
	}
	wg.Wait()
}

// progress shows a bar over the workload's duration (or order count) with the
// number of logical orders started.
func (r *runner) progress(start, end time.Time) func() {
	if r.cfg.Progress == nil {
		return func() {}
	}
	d := time.Duration(0)
	if r.cfg.Duration > 0 {
		d = end.Sub(start)
	}
	return bench.Progress(r.cfg.Progress, start, d, int64(r.cfg.Orders), r.started.Load,
		func(n int64, _ time.Time) string { return fmt.Sprintf("%d orders", n) })
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// preflight fails fast when the API or NATS cannot be reached, instead of
// after the whole workload.
func preflight(ctx context.Context, client *http.Client, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, u := range cfg.URLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("cannot reach the API at %s: %w", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("the API at %s answers /healthz with %d", u, resp.StatusCode)
		}
	}
	if err := pingEvents(ctx, cfg); err != nil {
		return fmt.Errorf("cannot read ORDER_EVENTS at %s: %w", jsstore.Redact(cfg.NATSURL), err)
	}
	return nil
}
