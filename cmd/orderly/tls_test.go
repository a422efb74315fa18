package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
