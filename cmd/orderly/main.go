// Command orderly is the one binary of orderly: the all-in-one server, its
// separate roles, and the tools to operate it. Only this package reads flags
// and the environment.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go"
	"github.com/willabides/kongplete"

	"github.com/orderly-dev/orderly/internal/bench"
	"github.com/orderly-dev/orderly/internal/natsserver"
)

const description = `orderly makes order ingestion safe to retry.

Clients POST /v1/orders with an Idempotency-Key; every retry with the same key
gets the same status and the same body, never a second order. Orders flow
through NATS JetStream: the API publishes a CreateOrder command, a processor
decides OrderCreated or OrderRejected, and projections answer the retries.

Start here: orderly serve (embedded NATS, data under ./data).

Every flag can also be set with the environment variable shown beside it.`

// CLI is the command line.
type CLI struct {
	LogLevel    slog.Level       `name:"log-level" env:"ORDERLY_LOG_LEVEL" default:"info" help:"Log level: debug, info, warn or error."`
	LogFormat   string           `name:"log-format" env:"ORDERLY_LOG_FORMAT" default:"text" enum:"text,json" help:"Log format: text or json."`
	ShowVersion kong.VersionFlag `name:"version" help:"Print the version and exit (as orderly version does)."`

	Serve       ServeCmd       `cmd:"" help:"Run the API and the processor (and, with --roles, the optional projector) in one process, with an embedded NATS server unless --nats-url is set."`
	API         APICmd         `cmd:"" name:"api" help:"Run only the HTTP API against a NATS cluster (--nats-url)."`
	Processor   ProcessorCmd   `cmd:"" help:"Run only the processor (CreateOrder -> events) against a NATS cluster (--nats-url)."`
	Projector   ProjectorCmd   `cmd:"" help:"Run only the projector against a NATS cluster (--nats-url): optional; it writes each key's response again from the events (needs orderly setup --projector)."`
	Setup       SetupCmd       `cmd:"" help:"Create (or, with --update-topology, update) the streams, the bucket and the consumers on a NATS cluster, with the operator's credentials. The roles only wait for them."`
	Credentials CredentialsCmd `cmd:"" help:"Create the NATS users' credentials and the nats-server configuration that declares them (init), and give a consumer service a key of its own (service add, remove, list)."`
	Events      EventsCmd      `cmd:"" help:"Read the order events (tail), and make the durable consumers of the services that consume them (consumer add, list, remove)."`
	Projections ProjectionsCmd `cmd:"" help:"Operate the read models: rebuild."`
	Status      StatusCmd      `cmd:"" help:"Show orderly's streams on NATS: messages, bytes, replicas, the leader and the replicas that are not current, and the backlog of the processors' and projectors' consumers."`
	DLQ         DLQCmd         `cmd:"" name:"dlq" help:"Inspect and replay dead-lettered commands: list, replay."`
	Keys        KeysCmd        `cmd:"" help:"Inspect and free idempotency keys: get, evict."`
	Tokens      TokensCmd      `cmd:"" help:"Manage the API's bearer tokens: add, list, remove."`
	Backup      BackupCmd      `cmd:"" help:"Back up orderly's streams and their consumers (JetStream snapshots, checked as they are taken) into a new directory; safe while orderly runs."`
	Restore     RestoreCmd     `cmd:"" help:"Restore a backup into a NATS whose orderly streams are missing or empty (a fresh cluster, after orderly setup), with sequences, timestamps and consumer positions as they were; then restart orderly's processes. The whole backup is read and checked before anything changes; a restore that stopped part way is finished by running it again."`
	Check       CheckCmd       `cmd:"" help:"Run a fault-finding workload against an orderly and verify that nothing was lost or duplicated; exits 1 on any violation."`
	Bench       BenchCmd       `cmd:"" help:"Load an orderly API over HTTP and report throughput, latency and how the machine's CPU was spent (busy, idle, stolen by a hypervisor); --baseline adds the ceiling and the raw JetStream rate. While it runs, stderr shows the rate and the p99 of the requests since the line before, so a tail that grows during a long run shows when."`
	Version     VersionCmd     `cmd:"" help:"Print the version."`
	Healthcheck HealthcheckCmd `cmd:"" help:"Exit 0 when an orderly process is ready (GET /readyz answers 200), 1 otherwise: the probe for container healthchecks, since the image has no shell tools."`
	Completion  CompletionCmd  `cmd:"" help:"Print what makes the shell complete orderly's commands, flags and flag values on Tab: source <(orderly completion bash) in ~/.bashrc, or zsh or fish."`

	BenchCeilingServer CeilingServerCmd `cmd:"" name:"bench-ceiling-server" hidden:"" help:"Serve the bare gin ceiling handler (used by bench --baseline)."`
}

// globals is what every command's Run receives.
type globals struct {
	ctx    context.Context
	logger *slog.Logger
}

func main() {
	// A serve's embedded NATS server runs in a child process of this binary.
	natsserver.RunChildIfAsked()
	var cli CLI
	parser := kong.Must(&cli,
		kong.Name("orderly"),
		kong.Description(description),
		kong.ShortUsageOnError(), // the usage line and where the help is, not all of it
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		nonNegativeDurations(),
		logLevels(),
		kong.Vars{"version": versionLine()},
	)
	// Asked by the shell for completions (orderly completion): print them
	// and exit, before anything else runs.
	kongplete.Complete(parser)
	kctx, err := parser.Parse(os.Args[1:])
	parser.FatalIfErrorf(err)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal asks for a graceful end; a second one ends the
	// process at once, the way signals do without a handler, for when the
	// graceful end waits on something that will not come (a slow client's
	// body, a NATS cluster without a leader). Everything acknowledged is
	// already stored: a kill loses nothing that kill -9 would not.
	context.AfterFunc(ctx, stop)
	ctx, denied := context.WithCancelCause(ctx)
	defer denied(nil)
	toolConns.Lock()
	toolConns.stop = denied
	toolConns.Unlock()
	logger := newLogger(cli.LogLevel, cli.LogFormat)
	for _, u := range unknownEnvs(kctx.Model, os.Environ()) {
		attrs := []any{"name", u.Name}
		if u.Closest != "" {
			attrs = append(attrs, "did_you_mean", u.Closest)
		}
		logger.Warn("environment variable read by no flag of orderly: ignored (each command's --help names the variables it reads)", attrs...)
	}
	err = kctx.Run(&globals{ctx: ctx, logger: logger})
	if cause := context.Cause(ctx); err == nil && errors.Is(cause, nats.ErrPermissionViolation) {
		// A command that takes the end of its context for an interrupt
		// (events tail) returns nil when a violation ended it.
		fmt.Fprintf(os.Stderr, "orderly: stopped: the NATS user may not do this (%v)%s\n", cause, useAnotherUser)
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orderly:", explainDenied(err))
		os.Exit(1)
	}
}

// nonNegativeDurations refuses a negative value for every duration flag and
// variable: none of orderly's means anything by one, and some took it
// silently as 0 (events tail --since=-5m printed every stored event). A flag
// tagged positive:"" refuses 0 too.
func nonNegativeDurations() kong.Option {
	return kong.TypeMapper(reflect.TypeFor[time.Duration](), kong.MapperFunc(func(ctx *kong.DecodeContext, target reflect.Value) error {
		t, err := ctx.Scan.PopValue("duration")
		if err != nil {
			return err
		}
		v, ok := t.Value.(string)
		if !ok {
			return fmt.Errorf("expected a duration such as 30s but got %v", t.Value)
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return fmt.Errorf("expected a duration such as 30s but got %q", v)
		case d < 0:
			return fmt.Errorf("%s is negative: give 0 or more", v)
		case d == 0 && ctx.Value.Tag != nil && ctx.Value.Tag.Has("positive"):
			// A flag whose 0 would mean nothing, or, to the configuration
			// below it, its default (--nats-timeout=0s was 10s).
			return fmt.Errorf("%s: give more than 0", v)
		}
		target.SetInt(int64(d))
		return nil
	}))
}

// logLevels reads --log-level as slog does (debug, INFO, warn+2), and says
// which levels there are when it cannot (slog says "unknown name").
func logLevels() kong.Option {
	return kong.TypeMapper(reflect.TypeFor[slog.Level](), kong.MapperFunc(func(ctx *kong.DecodeContext, target reflect.Value) error {
		var s string
		if err := ctx.Scan.PopValueInto("level", &s); err != nil {
			return err
		}
		var l slog.Level
		if err := l.UnmarshalText([]byte(s)); err != nil {
			return fmt.Errorf("%q: want debug, info, warn or error", s)
		}
		target.Set(reflect.ValueOf(l))
		return nil
	}))
}

func newLogger(level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run() error {
	fmt.Println(versionLine())
	return nil
}

// versionLine is what orderly version and orderly --version print.
func versionLine() string {
	v, c := buildVersion()
	return fmt.Sprintf("orderly %s (commit %s, %s)", v, c, runtime.Version())
}

// commit is set at build time with -ldflags "-X main.commit=...".
var commit = ""

// buildVersion is the version and commit stamped at build time, or, for a
// plain go build in a git checkout, the commit Go recorded.
func buildVersion() (v, c string) {
	v, c = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
			}
			if s.Key == "vcs.modified" && s.Value == "true" && commit == "" {
				c += "-dirty"
			}
		}
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}

// HealthcheckCmd is orderly healthcheck.
type HealthcheckCmd struct {
	URL     string        `name:"url" env:"ORDERLY_HEALTHCHECK_URL" default:"http://127.0.0.1:8080/readyz" help:"What to probe: /readyz (ready to work) or /healthz (alive)."`
	Timeout time.Duration `name:"timeout" default:"3s" positive:"" help:"How long to wait for the answer."`
}

// Validate refuses a URL that is not one of HTTP, before any probe.
func (c *HealthcheckCmd) Validate() error { return bench.CheckURL(c.URL) }

// Run probes.
func (c *HealthcheckCmd) Run(g *globals) error {
	ctx, cancel := context.WithTimeout(g.ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("unhealthy: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		// The answer's bytes as they may be printed (termsafe).
		return fmt.Errorf("unhealthy: %s answered %d: %s", c.URL, resp.StatusCode, safe(strings.TrimSpace(string(body))))
	}
	return nil
}
