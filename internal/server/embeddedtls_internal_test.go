package server

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestLoopbackURL: the URL orderly's own connection takes to its embedded
// server names loopback where the server listens on every address (the
// certificate holds 127.0.0.1 and ::1, not 0.0.0.0); other URLs stay.
func TestLoopbackURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"tls://0.0.0.0:4222":      "tls://127.0.0.1:4222",
		"nats://0.0.0.0:4222":     "nats://127.0.0.1:4222",
		"tls://[::]:4222":         "tls://[::1]:4222",
		"tls://127.0.0.1:4222":    "tls://127.0.0.1:4222",
		"tls://10.0.0.5:4222":     "tls://10.0.0.5:4222",
		"tls://nats.example:4222": "tls://nats.example:4222",
	} {
		if got := loopbackURL(in); got != want {
			t.Errorf("loopbackURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEmbeddedTLSHosts: the embedded server's certificate names the listen
// host, this host's name, the --nats-tls-host names, and, when it listens
// on every address, this host's addresses beyond loopback (none of them
// link-local).
func TestEmbeddedTLSHosts(t *testing.T) {
	t.Parallel()
	name, _ := os.Hostname()
	specific := embeddedTLSHosts("10.9.8.7:4222", []string{"nats.example.com"})
	for _, want := range []string{"10.9.8.7", name, "nats.example.com"} {
		if !slices.Contains(specific, want) {
			t.Errorf("listen on 10.9.8.7: %v lacks %q", specific, want)
		}
	}
	var mine []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			mine = append(mine, n.IP.String())
		}
	}
	for _, listen := range []string{"0.0.0.0:4222", "[::]:4222", ":4222"} {
		every := embeddedTLSHosts(listen, nil)
		for _, want := range append(mine, name) {
			if !slices.Contains(every, want) {
				t.Errorf("listen on %s: %v lacks %q", listen, every, want)
			}
		}
		for _, h := range every {
			if ip := net.ParseIP(h); ip != nil && (ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified()) || strings.Contains(h, "%") {
				t.Errorf("listen on %s: %v holds %q", listen, every, h)
			}
		}
	}
	for _, ip := range mine {
		if slices.Contains(specific, ip) {
			t.Errorf("listen on 10.9.8.7: %v holds this host's other address %s", specific, ip)
		}
	}
}

// TestNATSTLSValidation: --nats-tls takes auto, on and off; the embedded
// server's TLS is refused with --nats-url, and a TLS host must be a name or
// an address.
func TestNATSTLSValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		error string
	}{
		{"bad mode", func(c *Config) { c.NATSTLS = "yes" }, `--nats-tls must be auto, on or off, got "yes"`},
		{"on with --nats-url", func(c *Config) { c.NATSURL, c.NATSTLS = "nats://x:4222", NATSTLSOn }, "not with --nats-url"},
		{"hosts with --nats-url", func(c *Config) { c.NATSURL, c.NATSTLSHosts = "nats://x:4222", []string{"a.example"} }, "not with --nats-url"},
		{"bad host", func(c *Config) { c.NATSTLSHosts = []string{"not a name"} }, `--nats-tls-host "not a name"`},
		{"auto with --nats-url", func(c *Config) { c.NATSURL = "nats://x:4222" }, ""},
		{"on", func(c *Config) { c.NATSTLS, c.NATSTLSHosts = NATSTLSOn, []string{"a.example", "10.1.2.3"} }, ""},
	} {
		cfg := DefaultConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		if c.error == "" && err != nil || c.error != "" && (err == nil || !strings.Contains(err.Error(), c.error)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.error)
		}
	}
}
