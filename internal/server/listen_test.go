package server_test

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestAPIReachableFromOtherHostsNeedsTokens: an API that other hosts can
// reach is refused without tokens (anyone who reached it could place
// orders), unless anonymous clients are allowed explicitly; on loopback no
// tokens are needed, and a process without the API (its /healthz, /readyz
// and /metrics only) may listen anywhere.
func TestAPIReachableFromOtherHostsNeedsTokens(t *testing.T) {
	t.Parallel()
	for addr, loopback := range map[string]bool{
		"127.0.0.1:8080":        true,
		"127.0.0.53:0":          true,
		"[::1]:8080":            true,
		"[::ffff:127.0.0.1]:80": true,
		"localhost:8080":        true,
		"LOCALHOST:8080":        true,
		"0.0.0.0:8080":          false,
		":8080":                 false,
		"[::]:8080":             false,
		"10.0.0.5:8080":         false,
		"[fe80::1%eth0]:8080":   false,
		"orderly.example:8080":  false,
		"localhost.example:80":  false,
		"127.0.0.1":             false, // no port: not an address at all
	} {
		if got := server.LoopbackOnly(addr); got != loopback {
			t.Errorf("LoopbackOnly(%q) = %v, want %v", addr, got, loopback)
		}
	}

	const refused = "can be reached from other hosts, and without tokens anyone who reaches it can place orders"
	for _, c := range []struct {
		name      string
		addr      string
		roles     server.Roles
		tokens    map[string]string
		anonymous bool
		ok        bool
	}{
		{"serve on every interface", "0.0.0.0:8080", server.DefaultRoles, nil, false, false},
		{"serve on every interface, port only", ":8080", server.DefaultRoles, nil, false, false},
		{"the API alone on a LAN address", "10.0.0.5:8080", server.Roles{API: true}, nil, false, false},
		{"serve on loopback", "127.0.0.1:8080", server.DefaultRoles, nil, false, true},
		{"serve on every interface with tokens", "0.0.0.0:8080", server.DefaultRoles, map[string]string{"t0ken": "t1"}, false, true},
		{"serve on every interface, anonymous allowed", "0.0.0.0:8080", server.DefaultRoles, nil, true, true},
		{"a processor's operational endpoints", "0.0.0.0:8080", server.Roles{Processor: true}, nil, false, true},
	} {
		cfg := server.DefaultConfig()
		cfg.HTTPAddr, cfg.Roles, cfg.API.Tokens, cfg.HTTPAnonymous = c.addr, c.roles, c.tokens, c.anonymous
		err := cfg.Validate()
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), refused)):
			t.Errorf("%s: %v, want it refused", c.name, err)
		case !c.ok:
			for _, flag := range []string{c.addr, "--tokens-file", "--http-anonymous"} {
				if !strings.Contains(err.Error(), flag) {
					t.Errorf("%s: %q does not name %s", c.name, err, flag)
				}
			}
		}
	}
}

// TestProfilesOnlyOnLoopback: Go profiles have no authentication (and
// /debug/pprof/cmdline shows the command line), so their addresses must be
// loopback ones, tokens or not.
func TestProfilesOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, pprof, natsPprof string
		ok                     bool
	}{
		{"pprof on loopback", "127.0.0.1:6060", "", true},
		{"both on loopback", "localhost:6060", "[::1]:6061", true},
		{"pprof on every interface", "0.0.0.0:6060", "", false},
		{"pprof on a port only", ":6060", "", false},
		{"the server's on a LAN address", "", "10.0.0.5:6061", false},
	} {
		cfg := server.DefaultConfig()
		cfg.API.Tokens = map[string]string{"t0ken": "t1"}
		cfg.PprofAddr, cfg.NATSPprofAddr = c.pprof, c.natsPprof
		if c.natsPprof != "" {
			cfg.NATSProcess = natsserver.Child
		}
		err := cfg.Validate()
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "Go profiles have no authentication") || !strings.Contains(err.Error(), c.pprof+c.natsPprof)):
			t.Errorf("%s: %v, want it refused, naming the address", c.name, err)
		}
	}
}

// TestEmbeddedNATSBeyondLoopbackWarns: the embedded server has no TLS, so a
// --nats-listen that other hosts can reach is logged as a warning at start,
// naming the address and what to do; on loopback nothing is said.
func TestEmbeddedNATSBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	const warning = "without TLS"
	for addr, warns := range map[string]bool{
		fmt.Sprintf("0.0.0.0:%d", orderlytest.FreePort(t)): true,
		"127.0.0.1:-1": false,
	} {
		cfg := orderlytest.Config(t)
		cfg.NATSListen = addr
		cfg.NATSTLS = server.NATSTLSOff
		out := &orderlytest.Buffer{}
		orderlytest.StartLogged(t, cfg, slog.New(slog.NewTextHandler(out, nil)))
		if got := strings.Contains(out.String(), warning); got != warns {
			t.Errorf("--nats-listen %s: warned %v, want %v:\n%s", addr, got, warns, out.String())
		}
		if warns && !strings.Contains(out.String(), addr) {
			t.Errorf("--nats-listen %s: the warning does not name the address:\n%s", addr, out.String())
		}
	}
}

// TestEmbeddedNATSTLS: the embedded server's client port requires TLS when
// other hosts can reach it (--nats-tls auto) or when asked (on), in process
// and in a child process. A client without the CA of <data-dir>/credentials
// is refused, one with it gets in, by loopback and by an address of this
// host's network; orderly's own connection trusts the CA (an order goes
// through) and exports the certificate's end. On loopback, and with
// --nats-tls off, the port speaks plain NATS; only off beyond loopback warns
// of clear text.
func TestEmbeddedNATSTLS(t *testing.T) {
	t.Parallel()
	everywhere := func() string { return fmt.Sprintf("0.0.0.0:%d", orderlytest.FreePort(t)) }
	for _, c := range []struct {
		name, listen, tls, process string
		want                       bool
	}{
		{"every address, auto", everywhere(), server.NATSTLSAuto, natsserver.InProcess, true},
		{"every address, auto, child", everywhere(), server.NATSTLSAuto, natsserver.Child, true},
		{"loopback, on", "127.0.0.1:-1", server.NATSTLSOn, natsserver.InProcess, true},
		{"loopback, auto", "127.0.0.1:-1", server.NATSTLSAuto, natsserver.InProcess, false},
		{"every address, off", everywhere(), server.NATSTLSOff, natsserver.InProcess, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := orderlytest.Config(t)
			cfg.NATSListen, cfg.NATSTLS, cfg.NATSProcess = c.listen, c.tls, c.process
			out := &orderlytest.Buffer{}
			inst := orderlytest.StartLogged(t, cfg, slog.New(slog.NewTextHandler(out, nil)))
			if r := inst.PostOrder(t, "tls-1", orderlytest.Order("c-tls")); r.Status != http.StatusCreated {
				t.Fatalf("an order: %d %s", r.Status, r.Body)
			}
			ca := inst.Creds.TLSPath(natsauth.TLSCAFile)
			if got := inst.NATSCA() != ""; got != c.want {
				t.Errorf("TLS %v, want %v", got, c.want)
			}
			if warned, want := strings.Contains(out.String(), "clear text"), !c.want && !server.LoopbackOnly(c.listen); warned != want {
				t.Errorf("warned of clear text %v, want %v:\n%s", warned, want, out.String())
			}
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(inst.NATSURL(), "tls://"), "nats://"))
			urls := []string{"nats://127.0.0.1:" + port}
			if ip := networkAddress(); ip != "" && !server.LoopbackOnly(c.listen) {
				urls = append(urls, "nats://"+net.JoinHostPort(ip, port))
			}
			for _, url := range urls {
				plain, err := jsstore.Dial(url, jsstore.Credentials{NkeyFile: inst.Creds.SeedPath(natsauth.Operator)}, "tls-test")
				if err == nil {
					plain.Close()
				}
				if refused := err != nil; refused != c.want {
					t.Errorf("%s without the CA: refused %v (%v), want %v", url, refused, err, c.want)
				}
				if !c.want {
					continue
				}
				nc, err := jsstore.Dial(url, jsstore.Credentials{NkeyFile: inst.Creds.SeedPath(natsauth.Operator), CAFile: ca}, "tls-test")
				if err != nil {
					t.Errorf("%s with the CA %s: %v", url, ca, err)
					continue
				}
				if _, err := nc.TLSConnectionState(); err != nil {
					t.Errorf("%s with the CA: not TLS: %v", url, err)
				}
				nc.Close()
			}
			body := string(orderlytest.Do(t, http.MethodGet, inst.URL+"/metrics", nil).Body)
			if got := strings.Contains(body, "orderly_nats_tls_expiry_timestamp_seconds "); got != c.want {
				t.Errorf("certificate expiry exported %v, want %v", got, c.want)
			}
		})
	}
}

// networkAddress is an address of this host beyond loopback, "" when it has
// none.
func networkAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestEmbeddedNATSCertificateRenews: RenewNATSTLS (SIGHUP) keeps a
// certificate that is not due and issues one that is (here: its file gone)
// again; the server, in process or in a child, presents the new one to the
// next client without a restart, and orderly's own connection goes on.
func TestEmbeddedNATSCertificateRenews(t *testing.T) {
	t.Parallel()
	for _, process := range []string{natsserver.InProcess, natsserver.Child} {
		t.Run(process, func(t *testing.T) {
			t.Parallel()
			cfg := orderlytest.Config(t)
			cfg.NATSTLS, cfg.NATSProcess = server.NATSTLSOn, process
			inst := orderlytest.Start(t, cfg)
			served := func() *x509.Certificate {
				t.Helper()
				nc, err := jsstore.Dial(inst.NATSURL(), inst.Operator(), "tls-test")
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				st, err := nc.TLSConnectionState()
				if err != nil {
					t.Fatal(err)
				}
				return st.PeerCertificates[0]
			}
			before := served()
			if issued, ok, err := inst.RenewNATSTLS(); !ok || err != nil || issued.Node {
				t.Fatalf("a certificate that is not due: issued %+v, ok %v, err %v", issued, ok, err)
			}
			if err := os.Remove(inst.Creds.TLSPath(natsauth.TLSNodeFile)); err != nil {
				t.Fatal(err)
			}
			if issued, ok, err := inst.RenewNATSTLS(); !ok || err != nil || !issued.Node {
				t.Fatalf("a certificate whose file is gone: issued %+v, ok %v, err %v", issued, ok, err)
			}
			if after := served(); after.SerialNumber.Cmp(before.SerialNumber) == 0 {
				t.Fatalf("the server still presents certificate %s after it was issued again", before.SerialNumber)
			}
			if r := inst.PostOrder(t, "renewed-1", orderlytest.Order("c-tls")); r.Status != http.StatusCreated {
				t.Fatalf("an order after the renewal: %d %s", r.Status, r.Body)
			}
		})
	}
	plain := orderlytest.Start(t, orderlytest.Config(t))
	if _, ok, _ := plain.RenewNATSTLS(); ok {
		t.Fatal("RenewNATSTLS of a server without TLS says it renewed")
	}
}
