package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestJSDomainOnEveryConnection: every command that connects to NATS takes
// --nats-js-domain, and it reaches the connection's settings, for the roles
// (server.Config), setup and the tools alike.
func TestJSDomainOnEveryConnection(t *testing.T) {
	t.Parallel()
	connects := 0
	eachFlag(cliModel(t).Node, func(n *kong.Node, f *kong.Flag) {
		if f.Name != "nats-url" {
			return
		}
		connects++
		if !slices.ContainsFunc(n.AllFlags(false), func(g []*kong.Flag) bool {
			return slices.ContainsFunc(g, func(f *kong.Flag) bool { return f.Name == "nats-js-domain" })
		}) {
			t.Errorf("orderly %s connects to NATS (--nats-url) but takes no --nats-js-domain", n.Path())
		}
	})
	if connects < 10 {
		t.Fatalf("%d commands with --nats-url; the walk missed them", connects)
	}
	for _, role := range []string{"serve", "api", "processor", "projector"} {
		args := role + " --nats-url nats://x --nats-user u --nats-password p --nats-js-domain hub"
		cli := parseCLI(t, args)
		var cfg server.Config
		var err error
		switch role { // the roles apart get their NATS settings as runRole gives them
		case "serve":
			cfg, err = cli.Serve.config()
		case "api":
			cli.API.NATSFlags.apply(&cfg)
		case "processor":
			cli.Processor.NATSFlags.apply(&cfg)
		case "projector":
			cli.Projector.NATSFlags.apply(&cfg)
		}
		if err != nil || cfg.Credentials.JSDomain != "hub" {
			t.Errorf("%s: domain %q, %v; want hub", args, cfg.Credentials.JSDomain, err)
		}
	}
	if cli := parseCLI(t, "setup --nats-url nats://x --nats-js-domain hub"); cli.Setup.credentials().JSDomain != "hub" {
		t.Errorf("setup: domain %q", cli.Setup.credentials().JSDomain)
	}
	if cli := parseCLI(t, "status --nats-js-domain hub"); cli.Status.creds().JSDomain != "hub" {
		t.Errorf("status: domain %q", cli.Status.creds().JSDomain)
	}
}

// TestStatusNamesTheDomain: orderly status against a JetStream that has a
// domain and none of orderly's streams (a leaf node, asked without
// --nats-js-domain) says which domain it found and which flag names
// another; without a domain it says only that they are missing.
func TestStatusNamesTheDomain(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	for _, domain := range []string{"edge", ""} {
		ns := orderlytest.RunNATS(t, &natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, JetStreamDomain: domain,
			Users: []*natsserver.User{{Username: "orderly", Password: "s3cret-pass"}}})
		out, err := exec.Command(bin, "status", "--nats-url", ns.ClientURL(), "--nats-user", "orderly", "--nats-password", "s3cret-pass").CombinedOutput()
		named := strings.Contains(string(out), `domain "edge"`) && strings.Contains(string(out), "--nats-js-domain")
		if err == nil || !strings.Contains(string(out), "missing: ORDER_COMMANDS") || named != (domain != "") {
			t.Errorf("status on a JetStream of domain %q without orderly's streams: %v\n%s", domain, err, out)
		}
	}
}
