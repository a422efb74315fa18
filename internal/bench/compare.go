package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// CompareConfig configures Compare: orderly's load, and what it is compared with.
type CompareConfig struct {
	// Load is orderly's load.
	Load Config
	// Name names orderly's result rows.
	Name string
	// Baseline adds the ceiling and the raw JetStream publish rate.
	Baseline bool
	// Rounds measures orderly and the ceiling this many times, alternating,
	// and compares their medians (at least 1; only with Baseline).
	Rounds int
	// NATSURL is orderly's NATS: Compare waits there for the backlog to drain
	// between rounds, and measures the publish rate there.
	NATSURL string
	// Credentials authenticate at NATSURL (the operator's).
	Credentials jsstore.Credentials
	// Ceiling is the command that serves the ceiling handler and prints its
	// URL on the first line of stdout (orderly bench-ceiling-server).
	Ceiling []string
	// Progress receives progress lines.
	Progress io.Writer
}

// Report is what Compare measured.
type Report struct {
	Date     string            `json:"date"`
	Machine  string            `json:"machine"`
	Command  string            `json:"command"`
	Results  []Result          `json:"results"`
	Ratios   map[string]string `json:"ratios,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
}

// Compare loads orderly, and with Baseline the ceiling (alternating for
// Rounds) and the raw publish rate, and reports the results and ratios.
func Compare(ctx context.Context, cfg CompareConfig) (Report, error) {
	rep := Report{Date: time.Now().UTC().Format(time.RFC3339), Machine: Machine(), Command: "orderly " + strings.Join(os.Args[1:], " ")}
	rounds := max(cfg.Rounds, 1)
	if !cfg.Baseline {
		rounds = 1
	} else if err := reachNATS(ctx, cfg.NATSURL, cfg.Credentials); err != nil {
		// The baseline waits for the backlog and publishes on orderly's NATS:
		// find out before the first load, not after it.
		return rep, fmt.Errorf("--baseline waits for orderly's backlog and publishes on its NATS, which it cannot use: %w "+
			"(give --nats-url and the operator's --nats-nkey of orderly's server; orderly serve --nats-listen \"\" leaves tools no port)", err)
	}
	var ours, ceilings []Result
	for round := 1; round <= rounds; round++ {
		label := cfg.Name
		if rounds > 1 {
			label = fmt.Sprintf("%s #%d", cfg.Name, round)
		}
		fmt.Fprintf(cfg.Progress, "%s: %d connections, %s, ~%d-byte orders\n", label, cfg.Load.Connections, Describe(cfg.Load), cfg.Load.PayloadSize)
		res, err := Run(ctx, label, cfg.Load)
		if err != nil {
			return rep, err
		}
		ours = append(ours, res)
		rep.Results = append(rep.Results, res)
		if !cfg.Baseline {
			break
		}
		// Work the run left behind (an async backlog) would slow the ceiling down.
		if err := WaitIdle(ctx, cfg.NATSURL, cfg.Credentials, 5*time.Minute, cfg.Progress); err != nil {
			return rep, err
		}
		ceiling, err := runCeiling(ctx, cfg, round, rounds)
		if err != nil {
			return rep, fmt.Errorf("baseline: %w", err)
		}
		ceilings = append(ceilings, ceiling)
		rep.Results = append(rep.Results, ceiling)
	}
	if cfg.Baseline {
		fmt.Fprintf(cfg.Progress, "jetstream sync publish on %s: %d publishers, %s\n", cfg.NATSURL, cfg.Load.Connections, Describe(cfg.Load))
		pub, err := PublishRate(ctx, PublishConfig{NATSURL: cfg.NATSURL, Credentials: cfg.Credentials, Connections: cfg.Load.Connections,
			Duration: max(cfg.Load.Duration, 5*time.Second), PayloadSize: cfg.Load.PayloadSize})
		if err != nil {
			return rep, err
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
	rep.Warnings = append(rep.Warnings, warnings(rep.Results)...)
	if w := spread("the ceiling", ceilings); w != "" {
		rep.Warnings = append(rep.Warnings, w)
	}
	return rep, nil
}

// SpreadWarning is how far apart the fastest and the slowest round of the
// ceiling may be before the report says so: the same handler on the same
// machine should not move by more.
const SpreadWarning = 1.2

// spread is a warning when rounds of one target differ by SpreadWarning or
// more ("" when not): the machine's speed moved during the run, with or
// without steal to show for it.
func spread(name string, rounds []Result) string {
	if len(rounds) < 2 {
		return ""
	}
	lo, hi := rounds[0].PerSecond, rounds[0].PerSecond
	for _, r := range rounds[1:] {
		lo, hi = min(lo, r.PerSecond), max(hi, r.PerSecond)
	}
	if lo <= 0 || hi/lo < SpreadWarning {
		return ""
	}
	return fmt.Sprintf("%s made %.0f to %.0f req/s in its %d rounds (%.0f%% apart): the machine's speed moved during the run, "+
		"so its ratios are uncertain by as much; run more rounds, or again when the machine is quieter", name, lo, hi, len(rounds), 100*(hi/lo-1))
}

// warnings are what makes results doubtful: errors, and a hypervisor
// that took a share of the machine (StealWarning).
func warnings(rs []Result) []string {
	var ws []string
	for _, r := range rs {
		if r.Errors > 0 {
			ws = append(ws, fmt.Sprintf("%s: %d errors, first: %s", r.Name, r.Errors, r.FirstErr))
		}
		if m := r.MachineCPU; m != nil && m.Steal >= StealWarning {
			ws = append(ws, fmt.Sprintf("%s: the hypervisor took %.0f%% of this machine's CPU time (steal) during the run; "+
				"its rate says as much about the host's other guests as about the target, and ratios to runs that had the machine to themselves mean little",
				r.Name, 100*m.Steal))
		}
	}
	return ws
}

func medianRate(rs []Result) float64 {
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

// Describe is the length of a load: its duration or its request count.
func Describe(cfg Config) string {
	if cfg.Duration > 0 {
		return cfg.Duration.String()
	}
	return fmt.Sprintf("%d requests", cfg.Requests)
}

// runCeiling starts the ceiling server as a child process (so that it stands
// where orderly stands: another process on the same cores) and runs the same
// load against it.
func runCeiling(ctx context.Context, cfg CompareConfig, round, rounds int) (Result, error) {
	if len(cfg.Ceiling) == 0 {
		return Result{}, fmt.Errorf("no ceiling command")
	}
	cmd := exec.CommandContext(ctx, cfg.Ceiling[0], cfg.Ceiling[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return Result{}, fmt.Errorf("ceiling server did not start: %w", err)
	}
	load := cfg.Load
	load.URL = strings.TrimSpace(line)
	load.Mix = Mix{New: 100}             // the ceiling has no state: every request is new work
	load.Poll, load.PollEvery = false, 0 // nor any order to poll
	name := "gin ceiling (no NATS)"
	if rounds > 1 {
		name = fmt.Sprintf("%s #%d", name, round)
	}
	fmt.Fprintf(cfg.Progress, "%s at %s: %d connections, %s\n", name, load.URL, load.Connections, Describe(load))
	return Run(ctx, name, load)
}

// Print writes rep as a table.
func (rep Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n%s, %s\n\n", rep.Command, rep.Machine, rep.Date)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\treq/s\tp50 ms\tp95 ms\tp99 ms\tmax ms\tserver CPU µs/req\tmachine busy/idle/steal %\trequests\terrors\tstatus\t")
	for _, r := range rep.Results {
		var st []string
		for k, v := range r.Status {
			st = append(st, fmt.Sprintf("%s:%d", k, v))
		}
		slices.Sort(st)
		cpu := "-"
		if r.ServerCPUPerRequest > 0 {
			cpu = fmt.Sprintf("%.0f", r.ServerCPUPerRequest)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%d\t%d\t%s\t\n", r.Name, r.PerSecond,
			r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Latency.Max, cpu, r.MachineCPU, r.Requests, r.Errors, strings.Join(st, " "))
	}
	tw.Flush()
	for _, r := range rep.Results {
		if p := r.Polls; p != nil {
			fmt.Fprintf(w, "\n%s, its clients polling their 202s: %d orders followed, %d polls (%.2f an order), %d errors;\n"+
				"  seen decided %d of them, %.0f ms after the 202 at the median, p99 %.0f ms, max %.0f ms",
				r.Name, p.Orders, p.Polls, p.PerOrder, p.Errors, p.Decided, p.SeenDecided.P50, p.SeenDecided.P99, p.SeenDecided.Max)
			if left := p.Orders - p.Decided; left > 0 {
				fmt.Fprintf(w, "; %d still pending when the polling after the run ended", left)
			}
			fmt.Fprintln(w)
		}
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		keys := make([]string, 0, len(rep.Ratios))
		for k := range rep.Ratios {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s: %s\n", k, rep.Ratios[k])
		}
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
}

// Machine describes this machine: OS, CPUs, CPU model, Go version.
func Machine() string {
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

// reachNATS checks that url answers with creds and holds orderly's
// processor consumer, which the baseline's wait for the backlog reads.
func reachNATS(ctx context.Context, url string, creds jsstore.Credentials) error {
	js, err := jsstore.DialJetStream(url, creds, "orderly-bench")
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := js.Consumer(cctx, events.CommandStream, jsstore.ProcessorConsumer); err != nil {
		return fmt.Errorf("orderly's consumer %s on %s: %w", jsstore.ProcessorConsumer, events.CommandStream, jsstore.WithDenied(err, js.Conn()))
	}
	return nil
}
