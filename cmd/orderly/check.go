package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/orderly-dev/orderly/internal/check"
	"github.com/orderly-dev/orderly/internal/filesync"
)

// CheckCmd is orderly check.
type CheckCmd struct {
	URLs []string `name:"url" env:"ORDERLY_CHECK_URL" default:"http://127.0.0.1:8080" help:"Base URL of the orderly API under test. Several (comma-separated, or the flag repeated) take the requests in turn, as behind a load balancer, so that a client's retry may reach another API than its first attempt."`
	ToolNATS
	Tenant         string        `name:"tenant" default:"default" help:"Tenant of --token (idempotency keys are scoped by it)."`
	Token          string        `name:"token" env:"ORDERLY_CHECK_TOKEN" help:"Bearer token, when the API has tokens configured."`
	Clients        int           `name:"clients" short:"c" default:"16" help:"Concurrent clients."`
	Duration       time.Duration `name:"duration" short:"d" default:"30s" help:"How long to generate orders (0 with --orders: until that many)."`
	Orders         int           `name:"orders" short:"n" default:"0" help:"Stop after this many logical orders (0: run for --duration)."`
	RetryDelay     time.Duration `name:"retry-delay" default:"0s" help:"Delay of the delayed retries; set it longer than the server's --dedup-window to retry after the broker forgot the key (0 leaves that scenario out)."`
	Settle         time.Duration `name:"settle" default:"60s" help:"After the workload, how long clients may keep retrying and accepted orders may take to be decided; then as long again for reading ORDER_EVENTS while NATS does not answer."`
	Mix            string        `name:"mix" help:"Relative weights of the scenarios, such as sync:2,async:1,burst:1,delayed:1,changed:1,drop:1,reject:1 (default: all equal)."`
	RequestTimeout time.Duration `name:"request-timeout" default:"10s" help:"Timeout of each HTTP request."`
	Report         string        `name:"report" type:"path" help:"Write the full report (every order and attempt) as JSON to this file (checked before the run starts; written whole, then renamed into place)."`
	JSON           bool          `name:"json" help:"Print the summary as JSON instead of a table."`
}

// config is the checker's configuration of the flags, validated.
func (c *CheckCmd) config() (check.Config, error) {
	weights, err := parseWeights(c.Mix)
	if err != nil {
		return check.Config{}, err
	}
	cfg := check.Config{
		URLs: trimSlashes(c.URLs), NATSURL: c.NATSURL, NATSCredentials: c.creds(), Tenant: c.Tenant, Token: c.Token,
		Clients: c.Clients, Duration: c.Duration, Orders: c.Orders, RetryDelay: c.RetryDelay,
		Settle: c.Settle, Weights: weights, RequestTimeout: c.RequestTimeout, Progress: os.Stderr,
	}
	if c.Orders > 0 && c.Duration == 30*time.Second {
		cfg.Duration = 0 // --orders alone: until that many
	}
	return cfg, cfg.Validate()
}

// Run runs the check; it fails when a promise was broken.
func (c *CheckCmd) Run(g *globals) error {
	cfg, err := c.config()
	if err != nil {
		return err // before the banner: nothing is checked
	}
	if c.Report != "" {
		// A report that cannot be written is refused now, not after a run
		// of minutes whose details it was to keep.
		if err := filesync.CheckWritable(c.Report); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	fmt.Fprintf(os.Stderr, "checking %s with %d clients\n", strings.Join(cfg.URLs, ", "), cfg.Clients)
	rep, err := check.Run(g.ctx, cfg)
	if err != nil {
		return err
	}
	if c.Report != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		// Synced and renamed into place: the report of a run is all there
		// or not there, also after a power loss.
		if err := filesync.WriteFile(c.Report, b, 0o644); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	if c.JSON {
		summary := *rep
		summary.Details = nil
		b, _ := json.MarshalIndent(summary, "", "  ")
		fmt.Println(string(b))
	} else {
		rep.Print(os.Stdout)
	}
	if !rep.OK() {
		return fmt.Errorf("%d violation(s)", len(rep.Violations))
	}
	return nil
}

func parseWeights(s string) (map[check.Scenario]int, error) {
	if s == "" {
		return nil, nil
	}
	out := map[check.Scenario]int{}
	for _, part := range strings.Split(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.Atoi(v)
		known := false
		for _, sc := range check.Scenarios {
			known = known || string(sc) == name
		}
		if !ok || err != nil || n < 0 || !known {
			return nil, fmt.Errorf("--mix %q: want scenario:weight pairs, each weight a whole number of 0 or more; scenarios: %v", s, check.Scenarios)
		}
		if _, twice := out[check.Scenario(name)]; twice {
			return nil, fmt.Errorf("--mix %q: %s is given more than once", s, name)
		}
		out[check.Scenario(name)] = n
	}
	return out, nil
}

// trimSlashes is urls without their trailing slashes.
func trimSlashes(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = strings.TrimRight(u, "/")
	}
	return out
}
