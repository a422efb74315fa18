package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestConfigurationErrorsNameTheFlag: a value the command line parses but
// the configuration refuses is named by its flag, the name the user typed
// (or the one --help shows beside its environment variable), with the value
// and the reason. The errors said "result TTL", "dedup window", "HTTP header
// limit": names no flag has.
func TestConfigurationErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args string
		want []string
	}{
		{"serve --event-retention 1s", []string{"--event-retention (1s)", "--result-ttl (24h0m0s)"}},
		{"serve --result-ttl 1m", []string{"--result-ttl (1m0s)", "--dedup-window (2m0s)"}},
		{"serve --command-retention 1m", []string{"--command-retention (1m0s)", "--dedup-window (2m0s)"}},
		{"serve --dedup-window 10ms", []string{"--dedup-window", "10ms"}},
		{"serve --replicas 6", []string{"--replicas", "6"}},
		{"serve --replicas 3", []string{"--replicas 3", "--nats-url"}},
		{"serve --body-limit 1000", []string{"--body-limit", "1000"}},
		{"serve --wait 10s --max-wait 5s", []string{"--max-wait (5s)", "--wait (10s)"}},
		{"serve --processor-concurrency 0", []string{"--processor-concurrency", "got 0"}},
		{"serve --roles api,processor,projector --projector-concurrency 0", []string{"--projector-concurrency", "got 0"}},
		{"serve --http-max-header-bytes 100", []string{"--http-max-header-bytes", "100"}},
		{"serve --http-header-timeout 0s", []string{"--http-header-timeout", "0s"}},
		{"serve --http-body-timeout 0s", []string{"--http-body-timeout", "0s"}},
		{"serve --http-idle-timeout 0s", []string{"--http-idle-timeout", "0s"}},
		{"serve --store-fault-grace 0s", []string{"--store-fault-grace", "0s"}},
		{"serve --pprof-addr 0.0.0.0:6060", []string{"--pprof-addr 0.0.0.0:6060"}},
		{"serve --pprof-addr nonsense", []string{`--pprof-addr "nonsense"`}},
		{"serve --nats-pprof-addr 127.0.0.1:6061", []string{"--nats-pprof-addr", "--nats-process child"}},
		{"serve --decision-lag 5s --roles processor", []string{"--decision-lag", "--roles"}},
		{"serve --http-addr nonsense", []string{`--http-addr "nonsense"`}},
		{"serve --http-addr 0.0.0.0:8080", []string{"--http-addr 0.0.0.0:8080 can be reached from other hosts", "--tokens-file", "--http-anonymous"}},
		{"serve --fsync group --nats-url nats://127.0.0.1:4222", []string{"--fsync group", "--nats-url"}},
		{"serve --trace-sample-ratio 1.5", []string{"--trace-sample-ratio", "1.5"}},
		{"serve --otlp-endpoint ::bad", []string{`--otlp-endpoint "::bad"`}},
		{"serve --nats-tls-host bad_host!", []string{`--nats-tls-host "bad_host!"`}},
		{"api --nats-url nats://x --wait 10s --max-wait 5s", []string{"--max-wait (5s)", "--wait (10s)"}},
		{"processor --nats-url nats://x --processor-concurrency 0", []string{"--processor-concurrency", "got 0"}},
	} {
		refusedSaying(t, c.args, serveConfigOf(t, c.args).Validate(), c.want)
	}
	// orderly setup refuses the same topology flags, named the same way.
	for _, c := range []struct {
		args string
		want []string
	}{
		{"setup --nats-url nats://x --event-retention 1h", []string{"--event-retention (1h0m0s)", "--result-ttl (24h0m0s)"}},
		{"setup --nats-url nats://x --dedup-window 1ms", []string{"--dedup-window", "1ms"}},
		{"setup --nats-url nats://x --replicas 7", []string{"--replicas", "7"}},
	} {
		cli := parseCLI(t, c.args)
		refusedSaying(t, c.args, cli.Setup.topology().Validate(), c.want)
	}
	// The load tools' refusals, named the same way.
	for _, c := range []struct {
		args string
		want []string
	}{
		{"check --clients 0", []string{"--clients", "got 0"}},
		{"check --orders=-5", []string{"--orders", "-5"}},
		{"check --duration 0s --orders 0", []string{"--duration", "--orders"}},
		{"check --settle 0s", []string{"--settle", "0s"}},
		{"check --request-timeout 0s", []string{"--request-timeout", "0s"}},
		{"check --mix burst:-1", []string{`--mix "burst:-1"`, "0 or more"}},
		{"check --mix sync:0", []string{"--mix", "add up to 0"}},
		{"bench -c 0", []string{"--connections", "got 0"}},
		{"bench --requests=-5", []string{"--requests", "-5"}},
		{"bench --replay-keys=-1", []string{"--replay-keys", "-1"}},
		{"bench -d 0s", []string{"--duration", "--requests"}},
		{"bench --payload-size 50", []string{"--payload-size", "50"}},
		{"bench --progress-every 5ms", []string{"--progress-every", "5ms"}},
		{"bench --mix replay:100 --replay-keys 0", []string{"--mix", "--replay-keys"}},
	} {
		cli := parseCLI(t, c.args)
		var err error
		switch strings.Fields(c.args)[0] {
		case "check":
			_, err = cli.Check.config()
		case "bench":
			_, err = cli.Bench.config()
		}
		refusedSaying(t, c.args, err, c.want)
	}
	// A cluster's replicas are for a NATS of its own, and refused with the
	// embedded server only: there the stream's creation said "replicas > 1
	// not supported in non-clustered mode" after the server had started.
	for _, ok := range []string{"serve --replicas 1", "serve --nats-url nats://x --replicas 3"} {
		if err := serveConfigOf(t, ok).Validate(); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// serveConfigOf is the server configuration of a serve, api or processor
// command line.
func serveConfigOf(t *testing.T, args string) server.Config {
	t.Helper()
	if strings.HasPrefix(args, "serve ") {
		return serveConfig(t, args)
	}
	cli := parseCLI(t, args)
	var cfg server.Config
	var err error
	switch strings.Fields(args)[0] {
	case "api":
		cfg, err = cli.API.config()
		cli.API.NATSFlags.apply(&cfg)
	case "processor":
		cfg, err = cli.Processor.config()
		cli.Processor.NATSFlags.apply(&cfg)
	default:
		t.Fatalf("%s: not a serving command", args)
	}
	if err != nil {
		t.Fatalf("%s: %v", args, err)
	}
	return cfg
}

// refusedSaying fails t unless err refuses args and says each of want.
func refusedSaying(t *testing.T, args string, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", args)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", args, err, w)
		}
	}
}

// TestRefusedConfigurationIsAllTheOutput: a configuration orderly refuses is
// refused before anything is logged, applied or made: the output is the
// refusal (it began with "orderly starting" and the memory limit), and the
// data directory is not created.
func TestRefusedConfigurationIsAllTheOutput(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "data")
	out, err := exec.Command(bin, "serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", "", "--event-retention", "1h").CombinedOutput()
	if err == nil {
		t.Fatalf("accepted:\n%s", out)
	}
	want := "orderly: invalid configuration: --event-retention (1h0m0s) must be at least --result-ttl (24h0m0s): a stored result needs its event\n"
	if string(out) != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data directory: %v; want none made", err)
	}
}
