package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orderly-dev/orderly/internal/bench"
)

// BenchCmd is orderly bench.
type BenchCmd struct {
	URL         string        `name:"url" env:"ORDERLY_BENCH_URL" default:"http://127.0.0.1:8080" help:"Base URL of the orderly API to load."`
	Connections int           `name:"connections" short:"c" default:"64" help:"Concurrent connections, one request in flight each."`
	Duration    time.Duration `name:"duration" short:"d" default:"10s" help:"Length of the measured run (0 with --requests: until that many)."`
	Requests    int           `name:"requests" short:"n" default:"0" help:"Stop after this many requests (0: run for --duration)."`
	Warmup      time.Duration `name:"warmup" default:"2s" help:"Unmeasured load before the run."`
	PayloadSize int           `name:"payload-size" default:"500" help:"Approximate size of each order body in bytes."`
	Mix         string        `name:"mix" default:"new:100" help:"Request kinds in percent: new (fresh key), replay (key of a finished order), dup (the key another connection just sent). Example: new:80,replay:15,dup:5."`
	Async       bool          `name:"async" help:"Send Prefer: respond-async (answer 202 once stored)."`
	ReplayKeys  int           `name:"replay-keys" default:"2000" help:"Orders created before the run for the replays."`
	Token       string        `name:"token" env:"ORDERLY_BENCH_TOKEN" help:"Bearer token, when the API has tokens configured."`
	JSON        bool          `name:"json" help:"Print the results as JSON on stdout (progress still goes to stderr)."`
	Baseline    bool          `name:"baseline" help:"Also measure, in the same run, the ceiling (a bare gin handler in this binary doing the same HTTP and JSON work without NATS) and the raw JetStream synchronous publish rate on --nats-url, and print orderly's figures as ratios of them."`
	NATSURL     string        `name:"nats-url" env:"ORDERLY_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS of the orderly under test, for the publish baseline."`
	Waiters     int           `name:"waiters" help:"Instead of load: hold this many long polls (GET ?wait=) on one pending order and report what they cost the server (memory, goroutines) from its /metrics. Run the server with --roles api,projector so the order stays pending."`
	Hold        time.Duration `name:"hold" default:"30s" help:"With --waiters: the wait each long poll asks for (capped by the server's --max-wait)."`
	Rounds      int           `name:"rounds" default:"1" help:"With --baseline: measure orderly and the ceiling this many times, alternating, and compare their medians (a shared machine is noisy)."`
}

type benchReport struct {
	Date     string            `json:"date"`
	Machine  string            `json:"machine"`
	Command  string            `json:"command"`
	Results  []bench.Result    `json:"results"`
	Ratios   map[string]string `json:"ratios,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
}

// Run runs the benchmark.
func (c *BenchCmd) Run(g *globals) error {
	if c.Waiters > 0 {
		return c.runWaiters(g)
	}
	mix, err := bench.ParseMix(c.Mix)
	if err != nil {
		return err
	}
	cfg := bench.Config{
		URL: strings.TrimRight(c.URL, "/"), Connections: c.Connections, Duration: c.Duration, Requests: c.Requests,
		Warmup: c.Warmup, PayloadSize: c.PayloadSize, Mix: mix, Async: c.Async, ReplayKeys: c.ReplayKeys,
		Token: c.Token, Progress: os.Stderr,
	}
	if c.Requests > 0 && c.Duration == 10*time.Second {
		cfg.Duration = 0 // --requests alone: run until that many
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	rep := benchReport{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: machine(),
		Command: "orderly " + strings.Join(os.Args[1:], " "),
	}
	mode := "sync"
	if c.Async {
		mode = "async"
	}
	name := fmt.Sprintf("orderly (%s, %s)", mode, mix)
	rounds := max(c.Rounds, 1)
	if !c.Baseline {
		rounds = 1
	}
	var ours, ceilings []bench.Result
	for round := 1; round <= rounds; round++ {
		label := name
		if rounds > 1 {
			label = fmt.Sprintf("%s #%d", name, round)
		}
		fmt.Fprintf(os.Stderr, "%s: %d connections, %s, ~%d-byte orders\n", label, c.Connections, describe(cfg), c.PayloadSize)
		res, err := bench.Run(g.ctx, label, cfg)
		if err != nil {
			return err
		}
		ours = append(ours, res)
		rep.Results = append(rep.Results, res)
		if !c.Baseline {
			break
		}
		// Work the run left behind (an async backlog) would slow the ceiling down.
		if err := bench.WaitIdle(g.ctx, c.NATSURL, 5*time.Minute, os.Stderr); err != nil {
			return err
		}
		ceiling, err := c.runCeiling(g.ctx, cfg, round, rounds)
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		ceilings = append(ceilings, ceiling)
		rep.Results = append(rep.Results, ceiling)
	}
	if c.Baseline {
		fmt.Fprintf(os.Stderr, "jetstream sync publish on %s: %d publishers, %s\n", c.NATSURL, c.Connections, describe(cfg))
		pub, err := bench.PublishRate(g.ctx, bench.PublishConfig{NATSURL: c.NATSURL, Connections: c.Connections,
			Duration: max(cfg.Duration, 5*time.Second), PayloadSize: c.PayloadSize})
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results, pub)
		o, ceil := medianRate(ours), medianRate(ceilings)
		rep.Ratios = map[string]string{
			"orderly / gin ceiling":       fmt.Sprintf("%.2f (%.0f / %.0f req/s)", o/ceil, o, ceil),
			"orderly / jetstream publish": fmt.Sprintf("%.2f (%.0f / %.0f)", o/pub.PerSecond, o, pub.PerSecond),
		}
		if rounds > 1 {
			rep.Ratios["orderly / gin ceiling"] += fmt.Sprintf(", medians of %d rounds", rounds)
		}
	}
	for _, r := range rep.Results {
		if r.Errors > 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: %d errors, first: %s", r.Name, r.Errors, r.FirstErr))
		}
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printReport(os.Stdout, rep)
	return nil
}

func (c *BenchCmd) runWaiters(g *globals) error {
	fmt.Fprintf(os.Stderr, "holding %d long polls on %s\n", c.Waiters, c.URL)
	res, err := bench.Waiters(g.ctx, bench.WaitersConfig{URL: strings.TrimRight(c.URL, "/"), Count: c.Waiters, Hold: c.Hold, Token: c.Token}, os.Stderr)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	fmt.Printf("\n%s\n%s, %s\n\n", "orderly "+strings.Join(os.Args[1:], " "), machine(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("long polls waiting:   %d (all connected after %.1fs, %d errors)\n", res.Waiters, res.SecondsToConnect, res.Errors)
	fmt.Printf("server RSS:           %s -> %s  (%.1f KiB per waiter)\n", mib(res.Before.RSSBytes), mib(res.During.RSSBytes), res.RSSPerWaiter/1024)
	fmt.Printf("server heap in use:   %s -> %s  (%.1f KiB per waiter)\n", mib(res.Before.HeapInuseBytes), mib(res.During.HeapInuseBytes), res.HeapPerWaiter/1024)
	fmt.Printf("server goroutines:    %.0f -> %.0f  (%.2f per waiter)\n", res.Before.Goroutines, res.During.Goroutines, res.GoroutinesPer)
	return nil
}

func medianRate(rs []bench.Result) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.PerSecond
	}
	sort.Float64s(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

func describe(cfg bench.Config) string {
	if cfg.Duration > 0 {
		return cfg.Duration.String()
	}
	return fmt.Sprintf("%d requests", cfg.Requests)
}

// runCeiling starts the bare gin handler in a child process of this binary (so
// that it stands where orderly stands: another process on the same cores) and
// runs the same load against it.
func (c *BenchCmd) runCeiling(ctx context.Context, cfg bench.Config, round, rounds int) (bench.Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return bench.Result{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "bench-ceiling-server", "--addr", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return bench.Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return bench.Result{}, err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return bench.Result{}, fmt.Errorf("ceiling server did not start: %w", err)
	}
	cfg.URL = strings.TrimSpace(line)
	cfg.Mix = bench.Mix{New: 100} // the ceiling has no state: every request is new work
	name := "gin ceiling (no NATS)"
	if rounds > 1 {
		name = fmt.Sprintf("%s #%d", name, round)
	}
	fmt.Fprintf(os.Stderr, "%s at %s: %d connections, %s\n", name, cfg.URL, cfg.Connections, describe(cfg))
	return bench.Run(ctx, name, cfg)
}

func printReport(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "\n%s\n%s, %s\n\n", rep.Command, rep.Machine, rep.Date)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\treq/s\tp50 ms\tp95 ms\tp99 ms\tmax ms\tserver CPU µs/req\trequests\terrors\tstatus\t")
	for _, r := range rep.Results {
		var st []string
		for k, v := range r.Status {
			st = append(st, fmt.Sprintf("%s:%d", k, v))
		}
		cpu := "-"
		if r.ServerCPUPerRequest > 0 {
			cpu = fmt.Sprintf("%.0f", r.ServerCPUPerRequest)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%d\t%d\t%s\t\n", r.Name, r.PerSecond,
			r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Latency.Max, cpu, r.Requests, r.Errors, strings.Join(sorted(st), " "))
	}
	tw.Flush()
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		for _, k := range sorted(keys(rep.Ratios)) {
			fmt.Fprintf(w, "%s: %s\n", k, rep.Ratios[k])
		}
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sorted(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

func machine() string {
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, cpu, _ = strings.Cut(l, ":")
				cpu = strings.TrimSpace(cpu)
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %d CPUs, %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpu, runtime.Version())
}

// CeilingServerCmd serves the bench ceiling handler; orderly bench --baseline
// starts it. It prints its URL on the first line of stdout.
type CeilingServerCmd struct {
	Addr string `name:"addr" default:"127.0.0.1:0" help:"Listen address."`
}

// Run serves until interrupted.
func (c *CeilingServerCmd) Run(g *globals) error {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	fmt.Printf("http://%s\n", ln.Addr())
	srv := &http.Server{Handler: bench.BaselineHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-g.ctx.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
