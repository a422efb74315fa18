// Package bench is orderly's HTTP load generator and its baselines: the load
// behind `orderly bench`, a bare gin handler that decodes and validates the same
// JSON without NATS (the ceiling orderly is compared with), and the raw
// JetStream synchronous publish rate of the same messages.
package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/orderly-dev/orderly/internal/progress"
)

// Mix is the share of each kind of request, in percent of the total.
type Mix struct {
	// New: a fresh idempotency key (a new order).
	New int
	// Replay: a key of an order created before the run (a replay of a finished request).
	Replay int
	// Duplicate: the key another connection sent last, often still in flight
	// (concurrent duplicates).
	Duplicate int
}

// ParseMix parses "new:80,replay:15,dup:5". Missing kinds are 0; the sum must be 100.
func ParseMix(s string) (Mix, error) {
	var m Mix
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return m, fmt.Errorf("--mix %q: want kind:percent pairs such as new:80,replay:20", s)
		}
		if name == "duplicate" {
			name = "dup"
		}
		if seen[name] { // the last would count, and the sum be told wrong
			return m, fmt.Errorf("--mix %q: %s is given more than once", s, name)
		}
		seen[name] = true
		switch name {
		case "new":
			m.New = n
		case "replay":
			m.Replay = n
		case "dup":
			m.Duplicate = n
		default:
			return m, fmt.Errorf("--mix %q: unknown kind %q (new, replay, dup)", s, name)
		}
	}
	if m.New+m.Replay+m.Duplicate != 100 {
		return m, fmt.Errorf("--mix %q: percentages add up to %d, not 100", s, m.New+m.Replay+m.Duplicate)
	}
	return m, nil
}

// String is the flag form of m.
func (m Mix) String() string {
	return fmt.Sprintf("new:%d,replay:%d,dup:%d", m.New, m.Replay, m.Duplicate)
}

// Config configures a load run.
type Config struct {
	// URL is the base URL of the API, such as http://127.0.0.1:8080.
	URL string
	// Connections is the number of concurrent connections (one request in flight each).
	Connections int
	// Duration of the measured run; Requests, when > 0, ends it earlier.
	Duration time.Duration
	Requests int
	// Warmup runs before the measurement and is not counted.
	Warmup time.Duration
	// PayloadSize is the approximate size of an order body in bytes.
	PayloadSize int
	// Mix of request kinds.
	Mix Mix
	// Async sends Prefer: respond-async.
	Async bool
	// Poll makes each connection a client that follows its pending orders:
	// once a 202's Retry-After (or PollEvery) has passed, it GETs the order
	// before its next POST, until it sees the order decided; after the run
	// it polls what is still pending, for up to PollDrain. Result.Polls
	// says what the clients saw.
	Poll bool
	// PollEvery, when > 0, polls at this interval whatever Retry-After says
	// (a client that ignores it).
	PollEvery time.Duration
	// PollDrain bounds the polling after the run (default 60s).
	PollDrain time.Duration
	// ReplayKeys is how many orders are created before the run for replays.
	ReplayKeys int
	// Token is sent as Authorization: Bearer when not empty.
	Token string
	// Progress, when not nil, shows how far the run is: a bar on a
	// terminal, else a line every ProgressEvery and one at the end.
	Progress io.Writer
	// ProgressEvery is how often a progress line is written where Progress
	// is not a terminal, each with the rate and the p99 of the requests
	// since the line before (0: progress.Every, 5 s). At least 10 ms.
	ProgressEvery time.Duration
}

// CheckURL refuses a URL of orderly's API (or of one of its probes) that is
// not HTTP: the tools that send requests check theirs with it before they
// send any.
func CheckURL(u string) error {
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("url %q must start with http:// or https://", u)
	}
	return nil
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if err := CheckURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	if c.Connections < 1 {
		errs = append(errs, fmt.Errorf("--connections must be at least 1, got %d", c.Connections))
	}
	if c.Requests < 0 {
		errs = append(errs, fmt.Errorf("--requests must not be negative, got %d", c.Requests))
	}
	if c.ReplayKeys < 0 {
		errs = append(errs, fmt.Errorf("--replay-keys must not be negative, got %d", c.ReplayKeys))
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		errs = append(errs, errors.New("give a --duration or a number of --requests (both are 0)"))
	}
	if c.PayloadSize < 100 || c.PayloadSize > 60000 {
		errs = append(errs, fmt.Errorf("--payload-size must be 100 to 60000 bytes, got %d", c.PayloadSize))
	}
	if c.PollEvery < 0 {
		errs = append(errs, fmt.Errorf("--poll-every must not be negative, got %s", c.PollEvery))
	}
	if c.PollDrain < 0 {
		errs = append(errs, fmt.Errorf("--poll-drain must not be negative, got %s", c.PollDrain))
	}
	if c.ProgressEvery < 0 || (c.ProgressEvery > 0 && c.ProgressEvery < 10*time.Millisecond) {
		errs = append(errs, fmt.Errorf("--progress-every %s: give 0 (the default) or at least 10ms", c.ProgressEvery))
	}
	if c.PollEvery > 0 && !c.Poll {
		errs = append(errs, errors.New("--poll-every needs polling clients (--poll)"))
	}
	if c.Mix.Replay > 0 && c.ReplayKeys < 1 {
		errs = append(errs, errors.New("--mix with replays needs at least one --replay-keys"))
	}
	return errors.Join(errs...)
}

// Result is what a run measured.
type Result struct {
	Name string `json:"name"`
	// Started is when the measured run began (after the warm-up and the
	// orders made for replays): the 0 s of its progress lines, to line them
	// up with a server's log.
	Started   time.Time      `json:"started"`
	Requests  int            `json:"requests"`
	Errors    int            `json:"errors"`
	Seconds   float64        `json:"seconds"`
	PerSecond float64        `json:"per_second"`
	Latency   Percentiles    `json:"latency_ms"`
	Status    map[string]int `json:"status"`
	Kinds     map[string]int `json:"kinds,omitempty"`
	FirstErr  string         `json:"first_error,omitempty"`
	// ServerCPUPerRequest is the CPU the target process spent per request, in
	// microseconds (from its process_cpu_seconds_total; 0 when it has none,
	// or spent too little to tell: cpuPerRequest).
	// Steadier than throughput on a shared machine, and it counts the work done
	// in the background (processing) during the run too.
	ServerCPUPerRequest float64 `json:"server_cpu_us_per_request,omitempty"`
	// MachineCPU is how the whole machine's CPU time was spent during the run
	// (nil where the OS does not say): with steal, the rate says as much about
	// the host's other guests as about the target.
	MachineCPU *MachineCPU `json:"machine_cpu,omitempty"`
	// Polls is what the polling clients saw (Config.Poll).
	Polls   *PollResult     `json:"polls,omitempty"`
	samples []time.Duration `json:"-"`
}

// PollResult is what clients that poll their pending orders saw.
type PollResult struct {
	// Orders is how many 202s were followed; Decided how many of them the
	// clients saw decided (the rest were still pending when the polling
	// after the run ended).
	Orders  int `json:"orders"`
	Decided int `json:"decided"`
	// Polls is the GETs sent, during the run and after it; PerOrder per
	// order followed.
	Polls    int     `json:"polls"`
	PerOrder float64 `json:"polls_per_order"`
	// SeenDecided is the time from a 202 to the GET that saw its order
	// decided: when a polling client learns the outcome.
	SeenDecided Percentiles `json:"seen_decided_ms"`
	Errors      int         `json:"errors"`
}

// Percentiles of latency, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Body is an order body of about size bytes (items are added until it is).
func Body(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"customer_id":"c-bench","currency":"EUR","items":[`)
	total := 0
	for i := 0; ; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%05d","quantity":%d,"unit_price":%d}`, i, 1+i%3, 995+i)
		total += (1 + i%3) * (995 + i)
		if b.Len()+len(`],"total":`)+12 >= size {
			break
		}
	}
	fmt.Fprintf(&b, `],"total":%d}`, total)
	return b.Bytes()
}

// NewClient is an HTTP client for conns concurrent connections to one host.
func NewClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        conns * 2,
			MaxIdleConnsPerHost: conns * 2,
			MaxConnsPerHost:     conns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

type run struct {
	parent  context.Context // the run's, beyond the load's deadline
	cfg     Config
	client  *http.Client
	body    []byte
	prefix  string
	seq     atomic.Int64
	lastNew atomic.Pointer[string]
	replay  []string
	prefer  string
}

// Run runs the load and returns what it measured.
func Run(ctx context.Context, name string, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	r := &run{
		parent: ctx,
		cfg:    cfg,
		client: NewClient(cfg.Connections),
		body:   Body(cfg.PayloadSize),
		prefix: fmt.Sprintf("bench-%d-", time.Now().UnixNano()),
	}
	if cfg.Async {
		r.prefer = "respond-async"
	}
	defer r.client.CloseIdleConnections()
	if err := r.preflight(ctx); err != nil {
		return Result{}, err
	}
	if cfg.Mix.Replay > 0 {
		if err := r.prepareReplays(ctx); err != nil {
			return Result{}, err
		}
	}
	if cfg.Warmup > 0 {
		wctx, cancel := context.WithTimeout(ctx, cfg.Warmup)
		r.load(wctx, 0, nil, false)
		cancel()
	}
	lctx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	cpu0 := r.serverCPU(ctx)
	res := r.load(lctx, cfg.Requests, cfg.Progress, true)
	res.Name = name
	res.ServerCPUPerRequest = cpuPerRequest(cpu0, r.serverCPU(ctx), res.Requests)
	return res, nil
}

// minCPUSample is the least CPU time a run's figure per request is made
// from: process_cpu_seconds_total counts in clock ticks (10 ms on Linux),
// so a run of one request was said to cost 10,000 µs of server CPU.
const minCPUSample = 0.2 // seconds: a tick is 5% of it

// cpuPerRequest is the server CPU per request, in microseconds, between
// two readings of process_cpu_seconds_total; 0 (shown as "-") when either
// is missing or they are too close to tell.
func cpuPerRequest(cpu0, cpu1 float64, requests int) float64 {
	if cpu0 <= 0 || cpu1-cpu0 < minCPUSample || requests <= 0 {
		return 0
	}
	return (cpu1 - cpu0) / float64(requests) * 1e6
}

// serverCPU reads the target's process_cpu_seconds_total; 0 if it has none.
func (r *run) serverCPU(ctx context.Context) float64 {
	m, err := readMetrics(ctx, r.client, r.cfg.URL)
	if err != nil {
		return 0
	}
	return m.CPUSeconds
}

// preflight fails at once when the target does not answer.
func (r *run) preflight(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.URL+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", r.cfg.URL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/healthz answered %d", r.cfg.URL, resp.StatusCode)
	}
	return nil
}

// prepareReplays creates the orders whose keys the replays use.
func (r *run) prepareReplays(ctx context.Context) error {
	r.replay = make([]string, r.cfg.ReplayKeys)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for w := 0; w < r.cfg.Connections; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(r.replay) || ctx.Err() != nil {
					return
				}
				key := r.prefix + "replay-" + strconv.Itoa(i)
				status, _, err := r.post(ctx, key, "wait=30")
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("preparing replay key %s: status %d (is the processor running?)", key, status)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				r.replay[i] = key
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return *e
	}
	return ctx.Err()
}

// post sends the order body under key with the given Prefer header ("" for
// none), and returns the answer's status and header.
func (r *run) post(ctx context.Context, key, prefer string) (int, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.URL+"/v1/orders", bytes.NewReader(r.body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

type worker struct {
	samples  []time.Duration
	status   map[int]int
	kinds    [3]int
	errors   int
	firstErr error
	poll     *poller // with Config.Poll
}

// load runs the load until ctx ends or budget requests were sent; with
// Config.Poll, the clients then poll what is still pending, for up to
// PollDrain, unless drain is false (a warm-up).
func (r *run) load(ctx context.Context, budget int, progress io.Writer, drain bool) Result {
	workers := make([]*worker, r.cfg.Connections)
	var issued, done atomic.Int64
	var wg sync.WaitGroup
	var lat window
	machine := measureMachineCPU()
	start := time.Now()
	stopProgress := r.progress(ctx, progress, &done, &lat, start)
	for i := range workers {
		w := &worker{status: map[int]int{}}
		if r.cfg.Poll {
			w.poll = &poller{every: r.cfg.PollEvery, get: r.get}
		}
		workers[i] = w
		rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if w.poll != nil && w.poll.due(time.Now()) {
					w.poll.pollNext(ctx) // a client asks about its orders before it sends more
					continue
				}
				if budget > 0 && issued.Add(1) > int64(budget) {
					return
				}
				key, kind := r.nextKey(rng)
				t0 := time.Now()
				status, header, err := r.post(ctx, key, r.prefer)
				if ctx.Err() != nil && err != nil {
					return // the deadline cut this request: not counted
				}
				if w.poll != nil && err == nil && status == http.StatusAccepted {
					w.poll.follow(time.Now(), header)
				}
				took := time.Since(t0)
				w.samples = append(w.samples, took)
				lat.add(took)
				w.kinds[kind]++
				done.Add(1)
				if err != nil {
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
					continue
				}
				w.status[status]++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := machine() // the load only, not the polling after it
	stopProgress()
	if r.cfg.Poll && drain {
		dctx, cancel := context.WithTimeout(r.parent, cmp.Or(r.cfg.PollDrain, 60*time.Second))
		for _, w := range workers {
			wg.Go(func() { w.poll.drain(dctx) })
		}
		wg.Wait()
		cancel()
	}

	res := Result{Started: start, Status: map[string]int{}, Kinds: map[string]int{}, Seconds: elapsed.Seconds(), MachineCPU: cpu}
	for _, w := range workers {
		res.samples = append(res.samples, w.samples...)
		res.Errors += w.errors
		if w.firstErr != nil && res.FirstErr == "" {
			res.FirstErr = w.firstErr.Error()
		}
		for s, n := range w.status {
			res.Status[strconv.Itoa(s)] += n
		}
		for k, n := range w.kinds {
			if n > 0 {
				res.Kinds[[]string{"new", "replay", "dup"}[k]] += n
			}
		}
	}
	if r.cfg.Poll {
		ps := make([]*poller, len(workers))
		for i, w := range workers {
			ps[i] = w.poll
		}
		res.Polls = pollResult(ps)
	}
	res.Requests = len(res.samples)
	res.PerSecond = float64(res.Requests) / elapsed.Seconds()
	res.Latency = PercentilesOf(res.samples)
	return res
}

func (r *run) nextKey(rng *rand.Rand) (string, int) {
	p := rng.IntN(100)
	switch {
	case p < r.cfg.Mix.Replay:
		return r.replay[rng.IntN(len(r.replay))], 1
	case p < r.cfg.Mix.Replay+r.cfg.Mix.Duplicate:
		if k := r.lastNew.Load(); k != nil {
			return *k, 2
		}
	}
	key := r.prefix + strconv.FormatInt(r.seq.Add(1), 36)
	r.lastNew.Store(&key)
	return key, 0
}

// progress shows a bar up to the load's deadline (or over its request
// budget) with the current rate and p99.
func (r *run) progress(ctx context.Context, w io.Writer, done *atomic.Int64, lat *window, start time.Time) func() {
	if w == nil {
		return func() {}
	}
	var d time.Duration
	if end, ok := ctx.Deadline(); ok && r.cfg.Duration > 0 {
		d = max(end.Sub(start), time.Millisecond) // the load's context was made just before start
	}
	rate := rater{lastAt: start, min: tickInterval(w, r.cfg.ProgressEvery) / 2, lat: lat}
	return progressEvery(w, start, d, int64(r.cfg.Requests), done.Load, func(n int64, now time.Time) string {
		perSecond, p99 := rate.at(n, now)
		tail := "     -   " // no request ended in the interval
		if p99 > 0 {
			tail = fmt.Sprintf("%6.1f ms", float64(p99.Microseconds())/1000)
		}
		return fmt.Sprintf("%9d requests  %7.0f req/s  p99 %s", n, perSecond, tail)
	}, r.cfg.ProgressEvery)
}

// rater is the rate of a count, and the p99 of the latencies in lat, between
// the lines that show them. An interval shorter than min (the line at the
// end, drawn just after the last tick's) keeps the figures of the interval
// before it, where the division would make NaN (no time, no requests) or
// the figures of a few stragglers.
type rater struct {
	last   int64
	lastAt time.Time
	min    time.Duration
	rate   float64
	lat    *window       // nil: no p99
	p99    time.Duration // 0 when no request ended in the interval
}

func (r *rater) at(n int64, now time.Time) (float64, time.Duration) {
	if dt := now.Sub(r.lastAt); dt >= r.min && dt > 0 {
		r.rate = float64(n-r.last) / dt.Seconds()
		r.last, r.lastAt = n, now
		if r.lat != nil {
			r.p99, _ = r.lat.next(0.99)
		}
	}
	return r.rate, r.p99
}

// Progress shows the progress of a run on w until the returned stop is
// called: over d from start when d > 0, else over total items, of which
// count reports how many are done; describe labels it (the rate, say). On a
// terminal it is a bar redrawn every tick; elsewhere a line every
// progress.Every and one at stop: the time since start, the share done and
// the label.
func Progress(w io.Writer, start time.Time, d time.Duration, total int64, count func() int64, describe func(n int64, now time.Time) string) (stop func()) {
	return progressEvery(w, start, d, total, count, describe, 0)
}

// progressEvery is Progress with a plain line every `every` instead of
// progress.Every (0: progress.Every). It looks at the run at least as often
// as it writes a line, and below a second a line gives the time since
// start to a hundredth of a second, so that lines every 250 ms (say) tell
// apart the windows of a stall.
func progressEvery(w io.Writer, start time.Time, d time.Duration, total int64, count func() int64, describe func(n int64, now time.Time) string, every time.Duration) (stop func()) {
	max, byTime := total, d > 0
	if byTime {
		max = d.Milliseconds()
	}
	tick, clock := tickInterval(w, every), "%6.0fs"
	if every > 0 && every < time.Second {
		clock = "%7.2fs"
	}
	var n int64 // the last tick's count, and its time
	now := start
	bar := progress.New(w, max, func(done, max int64) string {
		pct := int64(100)
		if max > 0 {
			pct = min(100, 100*done/max)
		}
		return fmt.Sprintf(clock+" %3d%% %s", now.Sub(start).Seconds(), pct, strings.TrimSpace(describe(n, now)))
	},
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetElapsedTime(false),
		progressbar.OptionSetPredictTime(false),
	)
	if every > 0 && !bar.Terminal() {
		// A line at every tick (tickInterval): the ticker keeps the pace,
		// and the bar's own "at most every" would skip a tick that comes a
		// hair early.
		bar.SetEvery(tick / 2)
	}
	tickAt := func(t time.Time) {
		n, now = count(), t
		if bar.Terminal() {
			bar.Describe(describe(n, now))
		}
		if byTime {
			bar.Set(now.Sub(start).Milliseconds())
		} else {
			bar.Set(n)
		}
	}
	return everyTick(tick, tickAt, func() {
		tickAt(time.Now())
		bar.Finish(false)
	})
}

// tickInterval is how often a progress on w with lines every `every` (0:
// progress.Every) looks at the run: tickEvery by default; with an interval
// of its own, at that interval where w takes lines (one at each tick), and
// at least as often as tickEvery where it draws a bar.
func tickInterval(w io.Writer, every time.Duration) time.Duration {
	switch {
	case every <= 0:
		return tickEvery
	case !progress.IsTerminal(w):
		return every
	default:
		return min(every, tickEvery)
	}
}

// tickEvery is how often Progress looks at the run.
var tickEvery = 500 * time.Millisecond

// everyTick calls tick every interval from a goroutine of its own until the
// returned stop is called, then last; stop returns after last.
func everyTick(interval time.Duration, tick func(now time.Time), last func()) (stop func()) {
	halt := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-halt:
				last()
				return
			case now := <-t.C:
				tick(now)
			}
		}
	}()
	return func() { close(halt); <-finished }
}

// PercentilesOf sorts samples and returns their percentiles.
func PercentilesOf(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(samples)-1))
		return float64(samples[i].Microseconds()) / 1000
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: float64(samples[len(samples)-1].Microseconds()) / 1000}
}
