package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/orderly-dev/orderly/internal/bench"
)

// BenchCmd is orderly bench.
type BenchCmd struct {
	URL           string        `name:"url" env:"ORDERLY_BENCH_URL" default:"http://127.0.0.1:8080" help:"Base URL of the orderly API to load."`
	Connections   int           `name:"connections" short:"c" default:"64" help:"Concurrent connections, one request in flight each."`
	Duration      time.Duration `name:"duration" short:"d" default:"10s" help:"Length of the measured run (0 with --requests: until that many)."`
	Requests      int           `name:"requests" short:"n" default:"0" help:"Stop after this many requests (0: run for --duration)."`
	Warmup        time.Duration `name:"warmup" default:"2s" help:"Unmeasured load before the run (0: none)."`
	PayloadSize   int           `name:"payload-size" default:"500" help:"Approximate size of each order body in bytes."`
	Mix           string        `name:"mix" default:"new:100" help:"Request kinds in percent: new (fresh key), replay (key of a finished order), dup (the key another connection just sent). Example: new:80,replay:15,dup:5."`
	Async         bool          `name:"async" help:"Send Prefer: respond-async (answer 202 once stored)."`
	Poll          bool          `name:"poll" help:"Make each connection a client that follows its 202s: it GETs a pending order once the answer's Retry-After has passed (before its next POST) until it sees the order decided, and after the run polls what is still pending (up to --poll-drain). Reports the polls per order and when the clients saw their orders decided."`
	PollEvery     time.Duration `name:"poll-every" default:"0s" help:"With --poll: poll at this interval whatever Retry-After says (a client that ignores it); 0: honour Retry-After."`
	PollDrain     time.Duration `name:"poll-drain" default:"60s" positive:"" help:"With --poll: how long to go on polling after the run."`
	ReplayKeys    int           `name:"replay-keys" default:"2000" help:"Orders created before the run for the replays."`
	Token         string        `name:"token" env:"ORDERLY_BENCH_TOKEN" help:"Bearer token, when the API has tokens configured."`
	JSON          bool          `name:"json" help:"Print the results as JSON on stdout (progress still goes to stderr)."`
	ProgressEvery time.Duration `name:"progress-every" default:"5s" positive:"" help:"Where stderr is not a terminal: write a progress line this often, with the rate and the p99 of the requests since the line before (below 1s the lines give the time to a hundredth of a second: 250ms shows when a stall, such as a collection of a large heap, happens). At least 10ms."`
	Baseline      bool          `name:"baseline" help:"Also measure, in the same run, the ceiling (a bare gin handler in this binary doing the same HTTP and JSON work without NATS) and the raw JetStream synchronous publish rate on --nats-url, and print orderly's figures as ratios of them."`
	ToolNATS
	Waiters int           `name:"waiters" help:"Instead of load: hold this many long polls (GET ?wait=) on one pending order and report what they cost the server (memory, goroutines) from its /metrics. Run the server with --roles api,projector so the order stays pending."`
	Hold    time.Duration `name:"hold" positive:"" placeholder:"30s" help:"With --waiters: the wait each long poll asks for (capped by the server's --max-wait); 30s when not given."`
	Rounds  int           `name:"rounds" default:"1" help:"With --baseline: measure orderly and the ceiling this many times, alternating, and compare their medians (a shared machine is noisy); warns when the ceiling's rounds are 20% or more apart."`
}

// defaultHold is the wait of --waiters' long polls without --hold.
const defaultHold = 30 * time.Second

// Validate refuses counts out of range, and flags that the other flags
// given make meaningless: they were ignored without a word (--rounds 3
// without --baseline measured once).
func (c *BenchCmd) Validate() error {
	var errs []error
	if c.Waiters < 0 || c.Rounds < 1 {
		errs = append(errs, fmt.Errorf("--waiters must not be negative (got %d) and --rounds must be at least 1 (got %d)", c.Waiters, c.Rounds))
	}
	if c.Rounds > 1 && !c.Baseline {
		errs = append(errs, errors.New("--rounds needs --baseline: it alternates orderly's rounds with the ceiling's"))
	}
	if c.Hold > 0 && c.Waiters == 0 {
		errs = append(errs, errors.New("--hold needs --waiters: it is the wait of their long polls"))
	}
	if c.PollEvery > 0 && !c.Poll {
		errs = append(errs, errors.New("--poll-every needs --poll"))
	}
	if c.Waiters > 0 {
		var load []string
		for _, f := range []struct {
			name string
			set  bool
		}{{"--baseline", c.Baseline}, {"--async", c.Async}, {"--poll", c.Poll}, {"--requests", c.Requests > 0}, {"--rounds", c.Rounds > 1}} {
			if f.set {
				load = append(load, f.name)
			}
		}
		if len(load) > 0 {
			errs = append(errs, fmt.Errorf("--waiters holds long polls instead of a load: not with %s", strings.Join(load, ", ")))
		}
	}
	return errors.Join(errs...)
}

// config is the load's configuration of the flags, validated.
func (c *BenchCmd) config() (bench.Config, error) {
	mix, err := bench.ParseMix(c.Mix)
	if err != nil {
		return bench.Config{}, err
	}
	cfg := bench.Config{
		URL: strings.TrimRight(c.URL, "/"), Connections: c.Connections, Duration: c.Duration, Requests: c.Requests,
		Warmup: c.Warmup, PayloadSize: c.PayloadSize, Mix: mix, Async: c.Async, ReplayKeys: c.ReplayKeys,
		Poll: c.Poll, PollEvery: c.PollEvery, PollDrain: c.PollDrain, Token: c.Token, Progress: os.Stderr,
		ProgressEvery: c.ProgressEvery,
	}
	if c.Requests > 0 && c.Duration == 10*time.Second {
		cfg.Duration = 0 // --requests alone: run until that many
	}
	return cfg, cfg.Validate()
}

// Run runs the benchmark.
func (c *BenchCmd) Run(g *globals) error {
	if c.Waiters > 0 {
		return c.runWaiters(g)
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	mode := "sync"
	if c.Async {
		mode = "async"
	}
	rep, err := bench.Compare(g.ctx, bench.CompareConfig{
		Load: cfg, Name: fmt.Sprintf("orderly (%s, %s)", mode, cfg.Mix), Baseline: c.Baseline, Rounds: c.Rounds,
		NATSURL: c.NATSURL, Credentials: c.creds(), Ceiling: []string{exe, "bench-ceiling-server", "--addr", "127.0.0.1:0"}, Progress: os.Stderr,
	})
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.Print(os.Stdout)
	return nil
}

func (c *BenchCmd) runWaiters(g *globals) error {
	fmt.Fprintf(os.Stderr, "holding %d long polls on %s\n", c.Waiters, c.URL)
	res, err := bench.Waiters(g.ctx, bench.WaitersConfig{URL: strings.TrimRight(c.URL, "/"), Count: c.Waiters, Hold: cmp.Or(c.Hold, defaultHold), Token: c.Token}, os.Stderr)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	fmt.Printf("\n%s\n%s, %s\n\n", "orderly "+strings.Join(os.Args[1:], " "), bench.Machine(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("long polls waiting:   %d (all connected after %.1fs, %d errors)\n", res.Waiters, res.SecondsToConnect, res.Errors)
	fmt.Printf("server RSS:           %s -> %s  (%.1f KiB per waiter)\n", mib(res.Before.RSSBytes), mib(res.During.RSSBytes), res.RSSPerWaiter/1024)
	fmt.Printf("server heap in use:   %s -> %s  (%.1f KiB per waiter)\n", mib(res.Before.HeapInuseBytes), mib(res.During.HeapInuseBytes), res.HeapPerWaiter/1024)
	fmt.Printf("server goroutines:    %.0f -> %.0f  (%.2f per waiter)\n", res.Before.Goroutines, res.During.Goroutines, res.GoroutinesPer)
	return nil
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
