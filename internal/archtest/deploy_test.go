package archtest

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/orderly-dev/orderly/internal/natsauth"
)

// TestComposeOpensNothingWithoutAuthentication: what docker-compose.yml
// publishes on the host is on its loopback and needs a key or is the
// balancer (ADR 0017); the ports nothing authenticates (NATS monitoring,
// the balancer's stats) listen on their container's own loopback; and every
// NATS node starts through deploy/nats/run.sh, which puts the route password
// into its route URLs (ADR 0024), and every orderly process trusts the
// cluster's CA, dialing names its certificate holds (ADR 0025).
// docs/security.md's table of what listens
// says the same. Besides, every orderly role that runs for good has a
// memory limit, and a NATS node stops in lame-duck mode.
func TestComposeOpensNothingWithoutAuthentication(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Entrypoint  []string          `yaml:"entrypoint"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Volumes     []string          `yaml:"volumes"`
			Profiles    []string          `yaml:"profiles"`
			Labels      map[string]string `yaml:"labels"`
			Restart     string            `yaml:"restart"`
			MemLimit    string            `yaml:"mem_limit"`
			StopSignal  string            `yaml:"stop_signal"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	// What may be published, and what guards it.
	published := map[string]string{
		"4222":  "NATS clients: a user's nkey",
		"8080":  "the balancer, in front of APIs that take anonymous clients on the host's loopback (ADR 0017)",
		"16686": "the Jaeger UI, for a developer on the host, only with --profile tracing",
	}
	nodes := 0
	for name, svc := range compose.Services {
		for _, p := range svc.Ports {
			host, container, ok := strings.Cut(strings.TrimPrefix(p, "127.0.0.1:"), ":")
			if !strings.HasPrefix(p, "127.0.0.1:") || !ok {
				t.Errorf("%s publishes %q: give the host's loopback and both ports (127.0.0.1:HOST:CONTAINER)", name, p)
				continue
			}
			if _, ok := published[container]; !ok {
				t.Errorf("%s publishes its port %s (host %s), which nothing authenticates", name, container, host)
			}
			if container == "16686" && !slices.Equal(svc.Profiles, []string{"tracing"}) {
				t.Errorf("%s publishes the Jaeger UI without being opt-in (profiles %q, want [tracing])", name, svc.Profiles)
			}
		}
		for _, v := range []string{"NATS_HTTP", "LB_STATS_BIND"} {
			if addr, ok := svc.Environment[v]; ok && !strings.HasPrefix(addr, "127.0.0.1:") {
				t.Errorf("%s: %s=%s, which has no authentication: bind the container's loopback", name, v, addr)
			}
		}
		// Every NATS connection is TLS (ADR 0025): an orderly process trusts
		// the credentials volume's CA, and dials the nodes by names their
		// certificate holds.
		if urls, ok := svc.Environment["ORDERLY_NATS_URL"]; ok {
			if ca := svc.Environment["ORDERLY_NATS_CA"]; ca != "/credentials/"+natsauth.TLSCAFile {
				t.Errorf("%s: ORDERLY_NATS_CA=%q, want /credentials/%s (the nodes ask for TLS)", name, ca, natsauth.TLSCAFile)
			}
			if !slices.Contains(svc.Volumes, "credentials:/credentials:ro") {
				t.Errorf("%s does not mount the credentials volume at /credentials, where its CA is", name)
			}
			for _, u := range strings.Split(urls, ",") {
				if host := strings.Split(strings.TrimPrefix(u, "nats://"), ":")[0]; !slices.Contains(natsauth.DefaultTLSHosts, host) {
					t.Errorf("%s dials NATS at %s, a name the nodes' certificate does not hold (natsauth.DefaultTLSHosts)", name, host)
				}
			}
		}
		// A role that runs for good has a memory limit, which it takes
		// its Go memory limit from (ADR 0018).
		if strings.HasPrefix(svc.Image, "orderly:") && svc.Restart != "no" && svc.MemLimit == "" {
			t.Errorf("%s runs orderly without mem_limit", name)
		}
		if !strings.HasPrefix(svc.Image, "nats:") {
			continue
		}
		nodes++
		if !slices.Equal(svc.Entrypoint, []string{"/bin/sh", "/etc/nats/run.sh"}) {
			t.Errorf("%s: entrypoint %q, want deploy/nats/run.sh (the route password in the route URLs)", name, svc.Entrypoint)
		}
		for _, want := range []string{"./deploy/nats/node.conf:/etc/nats/node.conf:ro", "./deploy/nats/run.sh:/etc/nats/run.sh:ro", "credentials:/etc/nats/credentials:ro"} {
			if !slices.Contains(svc.Volumes, want) {
				t.Errorf("%s does not mount %s", name, want)
			}
		}
		// node.conf and run.sh are bind mounts; the label is what makes
		// docker compose up recreate the nodes when they change.
		if svc.Labels["orderly.node-config"] == "" {
			t.Errorf("%s has no orderly.node-config label", name)
		}
		if svc.StopSignal != "SIGUSR2" {
			t.Errorf("%s: stop_signal %q, want SIGUSR2 (lame-duck mode: its clients move before it stops)", name, svc.StopSignal)
		}
		for _, v := range []string{"NATS_ROUTE_1", "NATS_ROUTE_2", "NATS_ROUTE_3"} {
			addr := svc.Environment[v]
			if addr == "" || strings.Contains(addr, "://") || strings.Contains(addr, "@") {
				t.Errorf("%s: %s=%q, want host:port (run.sh adds the scheme and the password)", name, v, addr)
			}
			if host, _, _ := strings.Cut(addr, ":"); !slices.Contains(natsauth.DefaultTLSHosts, host) {
				t.Errorf("%s: %s=%q, a name the nodes' certificate does not hold: routes are TLS (natsauth.DefaultTLSHosts)", name, v, addr)
			}
		}
	}
	if nodes != 3 {
		t.Errorf("%d NATS nodes in the compose file, want 3", nodes)
	}
}
