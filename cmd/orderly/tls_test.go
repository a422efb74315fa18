package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestRolesOverTLS: orderly setup, the roles (serve --nats-url) and a tool
// reach a NATS that requires TLS with a certificate of a private CA when
// given --nats-ca, and an order goes through. Without it, setup fails within
// seconds, naming the flag; before --nats-ca there was no way to trust a
// private CA, and setup waited out its 2-minute startup budget. serve with
// its embedded server refuses --nats-ca (it would not be used).
func TestRolesOverTLS(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	creds := orderlytest.NewCredentials(t)
	files := orderlytest.NewTLSFiles(t)
	url := orderlytest.TLSNATS(t, creds, files)
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return string(out), err
	}
	operator := creds.SeedPath(natsauth.Operator)

	began := time.Now()
	if out, err := run("setup", "--nats-url", url, "--nats-nkey", operator); err == nil || !strings.Contains(out, "--nats-ca") || time.Since(began) > 20*time.Second {
		t.Fatalf("setup without --nats-ca, after %s: %v\n%s", time.Since(began).Round(time.Millisecond), err, out)
	}
	if out, err := run("setup", "--nats-url", url, "--nats-nkey", operator, "--nats-ca", files.CA); err != nil {
		t.Fatalf("setup with --nats-ca: %v\n%s", err, out)
	}

	httpAddr := fmt.Sprintf("127.0.0.1:%d", orderlytest.FreePort(t))
	p := &orderlytest.Process{T: t, Bin: bin, URL: "http://" + httpAddr, Args: []string{"serve", "--nats-url", url,
		"--nats-nkey", creds.SeedPath(natsauth.Serve), "--nats-ca", files.CA, "--http-addr", httpAddr}}
	p.Start()
	t.Cleanup(p.Kill9)
	r := orderlytest.Do(t, http.MethodPost, p.URL+"/v1/orders", orderlytest.Order("c-tls"), "Content-Type: application/json", "Idempotency-Key: tls-1")
	if r.Status != http.StatusCreated {
		t.Fatalf("an order over TLS: %d %s", r.Status, r.Body)
	}

	if out, err := run("status", "--nats-url", url, "--nats-nkey", operator, "--nats-ca", files.CA); err != nil || !strings.Contains(out, "ORDER_EVENTS") {
		t.Fatalf("status with --nats-ca: %v\n%s", err, out)
	}

	out, err := run("serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--nats-ca", files.CA,
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", orderlytest.FreePort(t)), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", orderlytest.FreePort(t)))
	if err == nil || !strings.Contains(out, "only with --nats-url") {
		t.Fatalf("serve with its embedded server and --nats-ca: %v\n%s", err, out)
	}
}

// TestServeWithNATSTLS: orderly serve with its embedded server on every
// address requires TLS there by default and says where its CA is; a tool
// run beside it (the default --data-dir) trusts that CA itself, also when
// the server has no TLS any more; a tool elsewhere needs --nats-ca, and the
// error names it. SIGHUP keeps a certificate that is not due and issues one
// that is again.
func TestServeWithNATSTLS(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := t.TempDir()
	port := orderlytest.FreePort(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", port)
	serve := func(listen string) *orderlytest.Process {
		httpAddr := fmt.Sprintf("127.0.0.1:%d", orderlytest.FreePort(t))
		out := &orderlytest.Buffer{}
		p := &orderlytest.Process{T: t, Bin: bin, Dir: dir, URL: "http://" + httpAddr, Output: out,
			Args: []string{"serve", "--nats-listen", listen, "--http-addr", httpAddr}}
		p.Start()
		t.Cleanup(p.Kill9)
		if r := orderlytest.Do(t, http.MethodPost, p.URL+"/v1/orders", orderlytest.Order("c-tls"), "Content-Type: application/json", "Idempotency-Key: tls-"+listen); r.Status != http.StatusCreated {
			t.Fatalf("an order: %d %s", r.Status, r.Body)
		}
		return p
	}
	run := func(wd string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = wd
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	p := serve(fmt.Sprintf("0.0.0.0:%d", port))
	ca := filepath.Join(dir, "data", "credentials", natsauth.TLSCAFile)
	if out := p.Output.(*orderlytest.Buffer).String(); !strings.Contains(out, "requires TLS") || !strings.Contains(out, ca) {
		t.Errorf("serve does not say that its NATS requires TLS, with the CA %s:\n%s", ca, out)
	}
	if out, err := run(dir, "status", "--nats-url", natsURL); err != nil || !strings.Contains(out, "ORDER_EVENTS") {
		t.Errorf("status beside serve: %v\n%s", err, out)
	}
	operator := filepath.Join(dir, "data", "credentials", natsauth.Operator+".nk")
	if out, err := run(t.TempDir(), "status", "--nats-url", natsURL, "--nats-nkey", operator); err == nil || !strings.Contains(out, "--nats-ca") {
		t.Errorf("status elsewhere without --nats-ca: %v\n%s", err, out)
	}
	if out, err := run(t.TempDir(), "status", "--nats-url", natsURL, "--nats-nkey", operator, "--nats-ca", ca); err != nil || !strings.Contains(out, "ORDER_EVENTS") {
		t.Errorf("status elsewhere with --nats-ca: %v\n%s", err, out)
	}

	log := p.Output.(*orderlytest.Buffer)
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	orderlytest.Eventually(t, 10*time.Second, "SIGHUP keeps a certificate that is not due", func() bool {
		return strings.Contains(log.String(), "certificate is not due for renewal")
	})
	if err := os.Remove(filepath.Join(dir, "data", "credentials", natsauth.TLSNodeFile)); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	orderlytest.Eventually(t, 10*time.Second, "SIGHUP issues a missing certificate again", func() bool {
		return strings.Contains(log.String(), "certificate was issued again")
	})
	if out, err := run(dir, "status", "--nats-url", natsURL); err != nil || !strings.Contains(out, "ORDER_EVENTS") {
		t.Errorf("status beside serve after the renewal: %v\n%s", err, out)
	}
	p.Kill9()

	serve(fmt.Sprintf("127.0.0.1:%d", port))
	if out, err := run(dir, "status", "--nats-url", natsURL); err != nil || !strings.Contains(out, "ORDER_EVENTS") {
		t.Errorf("status beside serve on loopback, without TLS, its CA still there: %v\n%s", err, out)
	}
}

// TestCredentialsInitTellsOfTLS: credentials init names the CA to give
// every process and the names of the nodes' certificate; it says when it
// issued the certificate again (a new --tls-host) or made a new CA in a
// directory that had credentials, each with the restart it needs, and
// nothing of the kind when it changed nothing.
func TestCredentialsInitTellsOfTLS(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "credentials")
	initDir := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"credentials", "init", dir}, args...)...).CombinedOutput()
		return string(out), err
	}
	const reissued, newCA = "issued again", "a new TLS CA"
	out, err := initDir()
	if err != nil || !strings.Contains(out, filepath.Join(dir, natsauth.TLSCAFile)) || !strings.Contains(out, "--nats-ca") ||
		!strings.Contains(out, "nats-1, nats-2, nats-3") || strings.Contains(out, reissued) || strings.Contains(out, newCA) {
		t.Fatalf("init of a new directory: %v\n%s", err, out)
	}
	if out, err := initDir("--tls-host", "nats.example.com,10.1.2.3"); err != nil || !strings.Contains(out, reissued+" (not valid for nats.example.com)") ||
		!strings.Contains(out, "SIGHUP") || !strings.Contains(out, "10.1.2.3") {
		t.Fatalf("init with new TLS hosts: %v\n%s", err, out)
	}
	if out, err := initDir(); err != nil || strings.Contains(out, reissued) || !strings.Contains(out, "nats.example.com") {
		t.Fatalf("init again: %v\n%s", err, out)
	}
	for _, f := range []string{natsauth.TLSCAFile, natsauth.TLSCAKeyFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := initDir(); err != nil || !strings.Contains(out, newCA) || !strings.Contains(out, "every orderly process") {
		t.Fatalf("init after the CA was deleted: %v\n%s", err, out)
	}
	if out, err := initDir("--tls-host", "not a name"); err == nil || !strings.Contains(out, `"not a name"`) {
		t.Fatalf("init with a TLS host that is not a name: %v\n%s", err, out)
	}
}

// TestNATSTLSFlagsReachTheConnection: --nats-ca, --nats-cert and --nats-key
// of a role and of a tool end up in the credentials its connection uses.
func TestNATSTLSFlagsReachTheConnection(t *testing.T) {
	t.Parallel()
	want := jsstore.Credentials{NkeyFile: "/k/api.nk", CAFile: "/t/ca.pem", CertFile: "/t/c.pem", KeyFile: "/t/c.key"}
	flags := "--nats-url nats://x --nats-nkey /k/api.nk --nats-ca /t/ca.pem --nats-cert /t/c.pem --nats-key /t/c.key"
	if got := parseCLI(t, "api "+flags).API.credentials(); got != want {
		t.Errorf("api: %+v, want %+v", got, want)
	}
	tool := parseCLI(t, "status "+flags).Status.creds()
	tool.InboxPrefix = ""
	if tool != want {
		t.Errorf("status: %+v, want %+v", tool, want)
	}
	serve := parseCLI(t, "serve --nats-tls on --nats-tls-host a.example --nats-tls-host 10.1.2.3")
	cfg, err := serve.Serve.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATSTLS != "on" || !slices.Equal(cfg.NATSTLSHosts, []string{"a.example", "10.1.2.3"}) {
		t.Errorf("serve --nats-tls on --nats-tls-host: %q %q", cfg.NATSTLS, cfg.NATSTLSHosts)
	}
	plain := parseCLI(t, "serve")
	if cfg, _ := plain.Serve.config(); cfg.NATSTLS != "auto" {
		t.Errorf("serve: --nats-tls %q, want auto", cfg.NATSTLS)
	}
}
