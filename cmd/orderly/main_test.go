package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/admin"
	"github.com/orderly-dev/orderly/internal/check"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// serveArgs are the arguments of an orderly serve on its own ports.
func serveArgs(t *testing.T, dataDir string) (args []string, url string) {
	httpPort, natsPort := orderlytest.FreePort(t), orderlytest.FreePort(t)
	return []string{"serve", "--data-dir", dataDir, "--http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--min-free-space", "0"}, fmt.Sprintf("http://127.0.0.1:%d", httpPort)
}

// TestSecondServeOnADataDirExits: two processes on one data directory corrupt
// the store and decide keys twice; the second exits at once, non-zero, naming
// the first. A holder killed with SIGKILL leaves no lock behind.
func TestSecondServeOnADataDirExits(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "data")
	args, url := serveArgs(t, dir)
	first := &orderlytest.Process{T: t, Bin: bin, Args: args, URL: url}
	first.Start()
	t.Cleanup(first.Kill9)

	args2, url2 := serveArgs(t, dir)
	// On ports of its own, and on the first one's ports (the same command
	// run twice): either way the holder is named, not a busy port.
	for _, a := range [][]string{args2, args} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var stderr bytes.Buffer
		second := exec.CommandContext(ctx, bin, a...)
		second.Stderr = &stderr
		err := second.Run()
		late := ctx.Err() // read before cancel, which sets it
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || late != nil {
			t.Fatalf("second serve %v: %v (stderr %s), want a non-zero exit at once", a, err, stderr.String())
		}
		want := "pid " + strconv.Itoa(first.Cmd.Process.Pid)
		if !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "in use") {
			t.Fatalf("second serve %v said %q; want it to name the holder (%s)", a, stderr.String(), want)
		}
	}

	first.Kill9()
	third := &orderlytest.Process{T: t, Bin: bin, Args: args2, URL: url2}
	third.Start() // fails the test unless it gets ready
	third.Kill9()
}

// TestBusyHTTPPortNamesTheFlag: serve on an HTTP or NATS address another
// process holds exits non-zero at once, naming the address and its flag,
// before it creates its data directory (a mistyped port leaves nothing
// behind).
func TestBusyHTTPPortNamesTheFlag(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	for _, flag := range []string{"--http-addr", "--nats-listen"} {
		dir := filepath.Join(t.TempDir(), "data")
		args, _ := serveArgs(t, dir)
		// The busy port is one this test holds from the start (a port
		// that FreePort had checked was once taken by someone else
		// before the test could listen on it).
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		args[slices.Index(args, flag)+1] = addr
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stderr = &stderr
		err = cmd.Run()
		late := ctx.Err() // read before cancel, which sets it
		cancel()
		l.Close()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || late != nil {
			t.Fatalf("serve on a busy %s: %v (stderr %s), want a non-zero exit", flag, err, stderr.String())
		}
		for _, want := range []string{addr, flag} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("serve said %q; want it to name %q", stderr.String(), want)
			}
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("serve on a busy %s left its data directory behind (%v)", flag, err)
		}
	}
}

// TestAPIOnEveryInterfaceNeedsTokens: orderly serve and orderly api on an
// address other hosts can reach, without --tokens-file, exit non-zero at
// once, before they create anything, naming the two ways out; with
// --http-anonymous serve warns that it does, and takes orders there.
func TestAPIOnEveryInterfaceNeedsTokens(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "data")
	args, _ := serveArgs(t, dir)
	port := orderlytest.FreePort(t)
	everywhere := fmt.Sprintf("0.0.0.0:%d", port)
	for i := range args {
		if args[i] == "--http-addr" {
			args[i+1] = everywhere
		}
	}
	for _, run := range [][]string{args, {"api", "--nats-url", "nats://127.0.0.1:1", "--http-addr", everywhere}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, run...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || timedOut {
			t.Fatalf("orderly %s: %v (stderr %s), want a non-zero exit at once", run[0], err, stderr.String())
		}
		for _, want := range []string{everywhere, "--tokens-file", "--http-anonymous"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("orderly %s said %q; want it to name %q", run[0], stderr.String(), want)
			}
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused serve left %s behind: %v", dir, err)
	}

	out := &orderlytest.Buffer{}
	anonymous := &orderlytest.Process{T: t, Bin: bin, Args: append(args, "--http-anonymous"), URL: fmt.Sprintf("http://127.0.0.1:%d", port), Output: out}
	anonymous.Start() // fails the test unless it gets ready
	defer anonymous.Kill9()
	if !strings.Contains(out.String(), "level=WARN") || !strings.Contains(out.String(), "takes orders without tokens from every host") {
		t.Errorf("no warning that the API is open to every host:\n%s", out)
	}
	r := orderlytest.Do(t, http.MethodPost, anonymous.URL+"/v1/orders", orderlytest.Order("c-1"), "Content-Type: application/json", "Idempotency-Key: anonymous-1")
	if r.Status != http.StatusCreated {
		t.Fatalf("an order with --http-anonymous: %d %s", r.Status, r.Body)
	}
}

// TestSecondSignalStopsAtOnce: a graceful end waits for a request whose body
// is still coming (up to the body timeout, two minutes here); a second
// SIGTERM ends the process at once, as a signal without a handler does, and
// the data directory serves again afterwards.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "data")
	args, url := serveArgs(t, dir)
	out := &orderlytest.Buffer{}
	p := &orderlytest.Process{T: t, Bin: bin, Args: append(args, "--http-body-timeout", "2m"), URL: url, Output: out}
	p.Start()
	t.Cleanup(p.Kill9)

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server answers 100 Continue once the handler reads the body.
	fmt.Fprint(conn, "POST /v1/orders HTTP/1.1\r\nHost: orderly\r\nContent-Type: application/json\r\nIdempotency-Key: slow\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("the slow request: %q, %v; want 100 Continue", line, err)
	}
	fmt.Fprint(conn, "{")

	exited := make(chan error, 1)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { exited <- p.Cmd.Wait() }()
	orderlytest.Eventually(t, 10*time.Second, "serve to log its shutdown", func() bool { return strings.Contains(out.String(), "shutting down") })
	select {
	case err := <-exited:
		t.Fatalf("serve ended at the first signal (%v) while a request was being sent: the test holds nothing up\n%s", err, out)
	case <-time.After(time.Second):
	}
	began := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("serve ended with %v at the second signal, want killed by SIGTERM", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("serve still runs 5 s after a second SIGTERM\n%s", out)
	}
	t.Logf("serve ended %s after the second signal", time.Since(began).Round(time.Millisecond))
	if !strings.Contains(out.String(), "a second SIGINT or SIGTERM stops the process at once") {
		t.Errorf("the shutdown's log line does not say that a second signal stops at once:\n%s", out)
	}

	again := &orderlytest.Process{T: t, Bin: bin, Args: args, URL: url}
	again.Start() // fails the test unless it gets ready
	defer again.Kill9()
	r := orderlytest.Do(t, http.MethodPost, url+"/v1/orders", orderlytest.Order("c-1"), "Content-Type: application/json", "Idempotency-Key: after")
	if r.Status != http.StatusCreated {
		t.Fatalf("an order after the kill: %d %s", r.Status, r.Body)
	}
}

// TestSlowClientsCannotTakeTheStoresFiles: orderly serve under a limit of
// 256 open files, and 400 connections that trickle a body (more than the
// limit). The connection cap keeps the store's files free and the body
// timeout frees the connections: the store never meets "too many open
// files", and once the slow clients are gone the service is ready and takes
// an order.
func TestSlowClientsCannotTakeTheStoresFiles(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	args, url := serveArgs(t, filepath.Join(t.TempDir(), "data"))
	args = append(args, "--http-body-timeout", "3s")
	out := &orderlytest.Buffer{}
	p := &orderlytest.Process{T: t, Bin: "sh", Args: []string{"-c", `ulimit -n 256 && exec "$0" "$@"`, bin}, URL: url, Output: out}
	p.Args = append(p.Args, args...)
	p.Start()
	t.Cleanup(p.Kill9)

	addr := strings.TrimPrefix(url, "http://")
	const n = 400
	var wg sync.WaitGroup
	var answered atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: orderly\r\nContent-Type: application/json\r\nIdempotency-Key: slow-%d\r\nContent-Length: 65536\r\n\r\n", i)
			_ = conn.SetDeadline(time.Now().Add(40 * time.Second))
			done := make(chan struct{})
			go func() {
				defer close(done)
				if line, _ := bufio.NewReader(conn).ReadString('\n'); strings.Contains(line, " 408 ") {
					answered.Add(1)
				}
			}()
			for {
				select {
				case <-done:
					return
				case <-time.After(time.Second):
					if _, err := conn.Write([]byte(" ")); err != nil {
						<-done
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := answered.Load(); got != n {
		t.Errorf("%d of %d slow uploads were answered 408", got, n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := orderlytest.TryDo(http.MethodGet, url+"/readyz", nil)
		if err == nil && r.Status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after the slow clients: %d %s %v\n%s", r.Status, r.Body, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := orderlytest.Do(t, http.MethodPost, url+"/v1/orders", orderlytest.Order("c-1"), "Content-Type: application/json", "Idempotency-Key: after")
	if r.Status != http.StatusCreated {
		t.Fatalf("after the slow clients: %d %s", r.Status, r.Body)
	}
	if log := out.String(); strings.Contains(log, "too many open files") {
		t.Fatalf("the process ran out of files:\n%s", log)
	}
}

// TestSecretsAreNeverPrinted: a password or token in a NATS URL is redacted
// in every log line and error, and bearer tokens never appear in the output,
// not even at debug level. /metrics asks for the token of
// --metrics-token-file, not an API token.
func TestSecretsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	down := orderlytest.FreePort(t) // nothing listens there
	for _, natsURL := range []string{
		fmt.Sprintf("nats://admin:s3cret-pw@127.0.0.1:%d", down),
		fmt.Sprintf("nats://s3cret-token@127.0.0.1:%d", down),
	} {
		cmd := exec.Command(bin, "api", "--nats-url", natsURL+",nats://127.0.0.1:1", "--startup-timeout", "6s",
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", orderlytest.FreePort(t)), "--log-level", "debug")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("api started without NATS:\n%s", out)
		}
		if bytes.Contains(out, []byte("s3cret")) {
			t.Errorf("the secret of %s was printed:\n%s", natsURL, out)
		}
		if !bytes.Contains(out, []byte("waiting for NATS")) {
			t.Errorf("no progress while waiting for NATS:\n%s", out)
		}
	}

	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("tenant-a s3cret-bearer-token-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsToken := filepath.Join(t.TempDir(), "metrics-token")
	if err := os.WriteFile(metricsToken, []byte("s3cret-metrics-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args, url := serveArgs(t, filepath.Join(t.TempDir(), "data"))
	out := &orderlytest.Buffer{}
	p := &orderlytest.Process{T: t, Bin: bin, Args: append(args, "--tokens-file", tokens, "--metrics-token-file", metricsToken, "--log-level", "debug"), URL: url, Output: out}
	p.Start()
	t.Cleanup(p.Kill9)
	for _, token := range []string{"s3cret-bearer-token-a", "s3cret-bearer-wrong"} {
		r := orderlytest.Do(t, http.MethodPost, url+"/v1/orders", orderlytest.Order("c-1"), "Content-Type: application/json",
			"Idempotency-Key: k", "Authorization: Bearer "+token)
		if bytes.Contains(r.Body, []byte("s3cret")) {
			t.Errorf("a response echoes the token: %s", r.Body)
		}
	}
	// /metrics asks for its own token, also on loopback; an API token is not it.
	for token, want := range map[string]int{"": 401, "s3cret-bearer-token-a": 401, "s3cret-metrics-token-0123": 200} {
		r := orderlytest.Do(t, http.MethodGet, url+"/metrics", nil, "Authorization: Bearer "+token)
		if r.Status != want || (want == 200) != bytes.Contains(r.Body, []byte("orderly_http_requests_total")) || bytes.Contains(r.Body, []byte("s3cret")) {
			t.Errorf("/metrics with %q: %d %.200s, want %d", token, r.Status, r.Body, want)
		}
	}
	_ = p.Cmd.Process.Signal(os.Interrupt)
	_, _ = p.Cmd.Process.Wait()
	if strings.Contains(out.String(), "s3cret") {
		t.Errorf("a token was printed:\n%s", out.String())
	}
}

// TestOperatorTools runs orderly keys and orderly dlq against a running
// orderly serve, with the operator's key it wrote.
func TestOperatorTools(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "data")
	args, url := serveArgs(t, dir)
	p := &orderlytest.Process{T: t, Bin: bin, Args: args, URL: url}
	p.Start()
	t.Cleanup(p.Kill9)
	var natsListen string
	for i, a := range args {
		if a == "--nats-listen" {
			natsListen = args[i+1]
		}
	}
	tool := func(args ...string) (string, error) {
		args = append(args, "--nats-url", "nats://"+natsListen, "--nats-nkey", filepath.Join(dir, "credentials", "operator.nk"))
		out, err := exec.Command(bin, args...).CombinedOutput()
		return string(out), err
	}
	r := orderlytest.Do(t, http.MethodPost, url+"/v1/orders", orderlytest.Order("c-1"), "Content-Type: application/json", "Idempotency-Key: tool-1")
	if r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	id, _ := r.JSON(t)["id"].(string)
	var out string
	orderlytest.Eventually(t, 10*time.Second, "keys get to show the stored response", func() bool {
		out, _ = tool("keys", "get", "tool-1")
		return strings.Contains(out, "state:") && strings.Contains(out, "completed")
	})
	for _, want := range []string{id, "(created)", "response:", "201", "expires:"} {
		if !strings.Contains(out, want) {
			t.Errorf("keys get does not show %q:\n%s", want, out)
		}
	}
	if out, err := tool("keys", "evict", "tool-1", "--yes"); err == nil || !strings.Contains(out, "stored response") {
		t.Errorf("keys evict of a completed key: %v\n%s", err, out)
	}
	if out, err := tool("keys", "get", "never-used"); err != nil || !strings.Contains(out, "none") {
		t.Errorf("keys get of an unused key: %v\n%s", err, out)
	}
	for seq, want := range map[string]string{"0": "sequences start at 1", "7": "no dead letter at 7"} {
		if out, err := tool("dlq", "replay", seq); err == nil || !strings.Contains(out, want) {
			t.Errorf("dlq replay %s: %v, want %q:\n%s", seq, err, want, out)
		}
	}
	// A backup goes into a new or empty directory, or one of a backup that
	// did not finish; never into a directory with other files, such as the
	// data directory of the running serve.
	if out, err := tool("backup", dir); err == nil || !strings.Contains(out, "is not empty") {
		t.Errorf("backup into the data directory: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, admin.ManifestFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup into the data directory wrote its manifest there: %v", err)
	}
	unfinished := t.TempDir()
	if err := os.MkdirAll(filepath.Join(unfinished, "ORDER_COMMANDS"), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := tool("backup", unfinished); err != nil {
		t.Errorf("backup into the directory of one that did not finish: %v\n%s", err, out)
	} else if out, err := tool("backup", unfinished); err == nil || !strings.Contains(out, "already holds a backup") {
		t.Errorf("a second backup into a backup's directory: %v\n%s", err, out)
	}
	// The header's value as sent names the same key; what the API would
	// refuse is refused, not reported as unused.
	if out, err := tool("keys", "get", `"tool-1";p=1`); err != nil || !strings.Contains(out, "completed") {
		t.Errorf("keys get of the quoted key: %v\n%s", err, out)
	}
	// Any tenant a tokens file may name is looked up, not only the names
	// tokens add makes.
	if out, err := tool("keys", "get", "tool-1", "--tenant", "acme:eu"); err != nil || !strings.Contains(out, "none") {
		t.Errorf("keys get for a tenant a tokens file may hold: %v\n%s", err, out)
	}
	for _, bad := range [][]string{{strings.Repeat("k", 256)}, {""}, {"a b"}, {"tool-1", "--tenant", "a b"}} {
		if out, err := tool(append([]string{"keys", "get"}, bad...)...); err == nil || strings.Contains(out, "none") || !strings.Contains(out, "orderly: ") {
			t.Errorf("keys get %q: %v, want a refusal:\n%s", bad, err, out)
		}
	}
	if out, err := tool("status"); err != nil || !strings.Contains(out, "order IDs of new orders: keyed") {
		t.Errorf("status does not show the stored form of order IDs: %v\n%s", err, out)
	} else if !regexp.MustCompile(`(?m)^ORDER_COMMANDS +[1-9][0-9,]* +[0-9.]+ (B|KiB|MiB) +1 `).MatchString(out) {
		t.Errorf("status does not show ORDER_COMMANDS' messages and size for a reader:\n%s", out)
	} else if !regexp.MustCompile(`(?m)^account storage: [1-9][0-9.]* (KiB|MiB) in JetStream, every copy counted, no limit`).MatchString(out) {
		t.Errorf("status does not show the account's storage:\n%s", out)
	}
	if out, err := tool("status", "--json"); err != nil || !strings.Contains(out, `"order_ids": "keyed"`) {
		t.Errorf("status --json does not show the stored form of order IDs: %v\n%s", err, out)
	} else if !regexp.MustCompile(`"bytes": [1-9][0-9]*,`).MatchString(out) {
		t.Errorf("status --json does not give exact byte counts:\n%s", out)
	}
	// The event of tool-1, then one of tool-2: --last 1 prints only tool-2's.
	r2 := orderlytest.Do(t, http.MethodPost, url+"/v1/orders", orderlytest.Order("c-2"), "Content-Type: application/json", "Idempotency-Key: tool-2")
	if r2.Status != http.StatusCreated {
		t.Fatalf("%d %s", r2.Status, r2.Body)
	}
	id2, _ := r2.JSON(t)["id"].(string)
	orderlytest.Eventually(t, 10*time.Second, "events tail to show both events", func() bool {
		out, _ = tool("events", "tail")
		return strings.Count(out, "\n") == 2
	})
	if out, err := tool("events", "tail", "-n", "1", "--type", "created"); err != nil || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, id2) || !strings.Contains(out, "customer=c-2") {
		t.Errorf("events tail -n 1: %v\n%s", err, out)
	}
	if out, err := tool("events", "tail", "-n", "0"); err != nil || out != "" {
		t.Errorf("events tail -n 0 printed stored events (as tail -n 0, it prints only new ones): %v\n%s", err, out)
	}
	if out, err := tool("events", "tail", "--last", "1", "--since", "1h"); err == nil || !strings.Contains(out, "can't be used together") {
		t.Errorf("events tail --last with --since: %v\n%s", err, out)
	}
	// A consumer service's durable consumer: made by the operator, read by
	// the events user (examples/consumer runs the rest of that path).
	if out, err := tool("events", "consumer", "add", "billing", "--type", "created"); err != nil ||
		!strings.Contains(out, "consumer billing on ORDER_EVENTS created: orders.events.created.>, from the first stored event") {
		t.Errorf("events consumer add: %v\n%s", err, out)
	}
	if out, err := tool("events", "consumer", "add", "billing", "--type", "all"); err != nil || !strings.Contains(out, "updated: orders.events.>") {
		t.Errorf("events consumer add of an existing consumer: %v\n%s", err, out)
	}
	if out, err := tool("events", "consumer", "add", "billing", "--type", "all"); err != nil || !strings.Contains(out, "unchanged: orders.events.>") {
		t.Errorf("events consumer add of an existing consumer as it is: %v\n%s", err, out)
	}
	if out, err := tool("events", "consumer", "add", "billing", "--new"); err == nil || !strings.Contains(out, "where a consumer starts cannot change") {
		t.Errorf("events consumer add --new of a consumer that delivers every event: %v\n%s", err, out)
	}
	for _, bad := range []string{"projector", "processor", "a.b", "a b", strings.Repeat("n", 65)} {
		if out, err := tool("events", "consumer", "add", bad); err == nil || !strings.Contains(out, "a consumer name is") {
			t.Errorf("events consumer add %q: %v, want the name refused\n%s", bad, err, out)
		}
	}
	eventsUser := jsstore.Credentials{NkeyFile: filepath.Join(dir, "credentials", "events.nk"), InboxPrefix: "_INBOX_events"}
	if ejs, err := jsstore.DialJetStream("nats://"+natsListen, eventsUser, "test-events"); err != nil {
		t.Fatal(err)
	} else {
		cons, err := ejs.Consumer(context.Background(), events.EventStream, "billing")
		if err != nil || cons.CachedInfo().NumPending != 2 {
			t.Errorf("the events user's view of billing: %v, want both events pending", err)
		}
		ejs.Conn().Close()
	}
	if out, err := tool("events", "consumer", "list"); err != nil || !regexp.MustCompile(`(?m)^billing +orders\.events\.> +2 +0 +0 +never$`).MatchString(out) {
		t.Errorf("events consumer list: %v, want billing with both events pending\n%s", err, out)
	}
	// A consumer made before ADR 0021 by a service, with a terminal escape in
	// its name (NATS allows it): listed escaped.
	if ojs, err := jsstore.DialJetStream("nats://"+natsListen, jsstore.Credentials{NkeyFile: filepath.Join(dir, "credentials", "operator.nk")}, "test-escape"); err != nil {
		t.Fatal(err)
	} else {
		if _, err := ojs.CreateConsumer(context.Background(), events.EventStream, jetstream.ConsumerConfig{Durable: "x\x1b[2Jy", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
		if out, err := tool("events", "consumer", "list"); err != nil || strings.Contains(out, "\x1b") || !strings.Contains(out, `x\u001b[2Jy`) {
			t.Errorf("events consumer list with an escape in a name: %v, want it escaped\n%q", err, out)
		}
		if err := ojs.DeleteConsumer(context.Background(), events.EventStream, "x\x1b[2Jy"); err != nil {
			t.Fatal(err)
		}
		ojs.Conn().Close()
	}
	if out, err := tool("events", "consumer", "list", "--json"); err != nil || !strings.Contains(out, `{"name":"billing","filter":"orders.events.>","pending":2,`) {
		t.Errorf("events consumer list --json: %v\n%s", err, out)
	}
	if out, err := tool("events", "consumer", "remove", "billing"); err != nil || !strings.Contains(out, "consumer billing removed") {
		t.Errorf("events consumer remove: %v\n%s", err, out)
	}
	if out, err := tool("events", "consumer", "remove", "billing"); err == nil || !strings.Contains(out, "ORDER_EVENTS has no consumer billing") {
		t.Errorf("events consumer remove of a missing consumer: %v\n%s", err, out)
	}
	if out, err := tool("events", "consumer", "list"); err != nil || !strings.Contains(out, "no durable consumers on ORDER_EVENTS") {
		t.Errorf("events consumer list without consumers: %v\n%s", err, out)
	}

	// orderly check against this serve writes its report, whole. (Sync
	// orders only: the tail below looks for a created order's event last.)
	report := filepath.Join(t.TempDir(), "report.json")
	if out, err := tool("check", "--url", url, "-n", "4", "-c", "2", "--settle", "20s", "--mix", "sync:1", "--report", report); err != nil {
		t.Errorf("check --report: %v\n%s", err, out)
	} else if b, err := os.ReadFile(report); err != nil {
		t.Errorf("check --report: %v", err)
	} else {
		var rep check.Report
		if err := json.Unmarshal(b, &rep); err != nil || rep.Orders != 4 || len(rep.Details) != 4 || !rep.OK() {
			t.Errorf("check --report wrote %d orders (%d in detail), violations %v, %v; want 4, none:\n%.300s", rep.Orders, len(rep.Details), rep.Violations, err, b)
		}
	}

	// A user that may not read the streams: the server refuses by an error on
	// the connection only, and the tool's call would time out; the violation
	// ends the command at once (not after the request's timeout, 5 s), and
	// its error says why.
	denied := exec.Command(bin, "status", "--nats-url", "nats://"+natsListen, "--nats-nkey", filepath.Join(dir, "credentials", "events.nk"))
	began := time.Now()
	deniedOut, err := denied.CombinedOutput()
	out = string(deniedOut)
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("status as the events user failed after %s: the refused request waited out its timeout", took.Round(time.Millisecond))
	}
	if err == nil || !strings.Contains(out, "the NATS user may not do this (nats: permissions violation") {
		t.Errorf("status as the events user: %v\n%s", err, out)
	} else if n := strings.Count(strings.ToLower(out), "permissions violation for publish"); n != 1 {
		// nats.go's default handler wrote each one again ("... on connection [N]").
		t.Errorf("status as the events user names the violation %d times, want once:\n%s", n, out)
	}
	// events tail as the events user reads by sequence (--read auto): the
	// events, without a consumer it may not create.
	tail := exec.Command(bin, "events", "tail", "-n", "1", "--nats-url", "nats://"+natsListen, "--nats-nkey", filepath.Join(dir, "credentials", "events.nk"))
	if out, err := tail.CombinedOutput(); err != nil || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), " created ") {
		t.Errorf("events tail -n 1 as the events user: %v, want the last event\n%s", err, out)
	}
	// Told to read through a consumer, it may not: events tail takes the end
	// of its context for an interrupt (exit 0); ended by a violation, it
	// fails with it.
	tail = exec.Command(bin, "events", "tail", "--read", "consumer", "--nats-url", "nats://"+natsListen, "--nats-nkey", filepath.Join(dir, "credentials", "events.nk"))
	if out, err := tail.CombinedOutput(); err == nil || !strings.Contains(string(out), "stopped: the NATS user may not do this (nats: permissions violation") {
		t.Errorf("events tail --read consumer as the events user: %v\n%s", err, out)
	}
	if out, err := tool("dlq", "list"); err != nil || !strings.Contains(out, "no dead letters") {
		t.Errorf("dlq list: %v\n%s", err, out)
	}
	if out, err := tool("dlq", "replay"); err == nil || !strings.Contains(out, "--all") {
		t.Errorf("dlq replay without arguments: %v\n%s", err, out)
	}

	// A dead letter is written by another process: one whose reason and
	// command hold terminal escapes (published here as the operator) is
	// listed with them escaped, in both forms.
	js, err := jsstore.DialJetStream("nats://"+natsListen, jsstore.Credentials{NkeyFile: filepath.Join(dir, "credentials", "operator.nk")}, "test")
	if err != nil {
		t.Fatal(err)
	}
	hostile := &nats.Msg{Subject: events.DeadLetterSubject, Header: nats.Header{"reason_poisoned": []string{"boom \x1b]0;pwned\x07\u202e"}},
		Data: []byte("{\"tenant\":\"t\x1b[2J\x9b\xff\"}")}
	if _, err := js.PublishMsg(context.Background(), hostile); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"dlq", "list"}, {"dlq", "list", "--json"}} {
		out, err := tool(args...)
		if err != nil || !strings.Contains(out, `boom \u001b]0;pwned\u0007\u202e`) {
			t.Errorf("%s: %v, the reason not shown escaped:\n%q", args, err, out)
		}
		for _, c := range []string{"\x1b", "\x07", "\u202e", "\x9b", "\xff"} {
			if strings.Contains(out, c) {
				t.Errorf("%s: the output holds %q:\n%q", args, c, out)
			}
		}
	}

	// A stream that is gone (deleted by hand, or a restore that stopped) is
	// shown with the others, and status fails naming it; before, status
	// printed only "stream not found".
	if err := js.DeleteStream(context.Background(), events.DeadLetterStream); err != nil {
		t.Fatal(err)
	}
	out, err = tool("status")
	if err == nil || !regexp.MustCompile(`(?m)^ORDER_COMMANDS_DLQ +missing `).MatchString(out) || !regexp.MustCompile(`(?m)^ORDER_EVENTS +[1-9]`).MatchString(out) ||
		!strings.Contains(out, "orderly: missing: ORDER_COMMANDS_DLQ (orderly setup creates a missing stream") {
		t.Errorf("status without the dead-letter stream: %v\n%s", err, out)
	}
	if out, err := tool("status", "--json"); err == nil || !strings.Contains(out, `"stream": "ORDER_COMMANDS_DLQ",
    "messages": 0,
    "bytes": 0,
    "replicas": 0,
    "missing": true`) {
		t.Errorf("status --json without the dead-letter stream: %v\n%s", err, out)
	}
}

// TestTokensReloadOnSIGHUP: orderly serve re-reads --tokens-file on SIGHUP.
// A token added with orderly tokens add works without a restart, one
// removed with orderly tokens remove stops working (the log names each by
// its ID), and a file that no longer holds a valid set changes
// nothing and is logged; --metrics-token-file the same. SIGHUP never stops
// the process.
func TestTokensReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("tenant-a first-token-of-tenant-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsToken := filepath.Join(t.TempDir(), "metrics-token")
	if err := os.WriteFile(metricsToken, []byte("first-metrics-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args, url := serveArgs(t, filepath.Join(t.TempDir(), "data"))
	out := &orderlytest.Buffer{}
	p := &orderlytest.Process{T: t, Bin: bin, Args: append(args, "--tokens-file", tokens, "--metrics-token-file", metricsToken), URL: url, Output: out}
	p.Start()
	t.Cleanup(p.Kill9)
	n := 0
	post := func(token string) int {
		n++
		return orderlytest.Do(t, http.MethodPost, url+"/v1/orders", orderlytest.Order("c-1"), "Content-Type: application/json",
			fmt.Sprintf("Idempotency-Key: k-%d", n), "Prefer: respond-async", "Authorization: Bearer "+token).Status
	}
	hup := func(wantLog string) {
		t.Helper()
		before := strings.Count(out.String(), wantLog)
		if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		orderlytest.Eventually(t, 10*time.Second, "the log line "+wantLog, func() bool {
			return strings.Count(out.String(), wantLog) > before
		})
	}
	if s := post("first-token-of-tenant-a"); s != http.StatusAccepted {
		t.Fatalf("the first token: %d", s)
	}

	added, err := exec.Command(bin, "tokens", "add", "tenant-b", "--tokens-file", tokens).Output()
	if err != nil {
		t.Fatal(err)
	}
	second := strings.TrimSpace(string(added))
	if s := post(second); s != http.StatusUnauthorized {
		t.Fatalf("the added token before SIGHUP: %d", s)
	}
	hup("added_ids=" + api.TokenID(second))
	if s := post(second); s != http.StatusAccepted {
		t.Fatalf("the added token after SIGHUP: %d\n%s", s, out.String())
	}

	// Revoke the first token by its ID; the log names it so.
	first := api.TokenID("first-token-of-tenant-a")
	if out, err := exec.Command(bin, "tokens", "remove", first, "--tokens-file", tokens).CombinedOutput(); err != nil {
		t.Fatalf("tokens remove %s: %v\n%s", first, err, out)
	}
	if got, err := os.ReadFile(tokens); err != nil || string(got) != "tenant-b "+second+"\n" {
		t.Fatalf("the file after tokens remove: %q, %v", got, err)
	}
	hup("added=0 removed=1 moved_to_another_tenant=0 added_ids=\"\" removed_ids=" + first)
	if s := post("first-token-of-tenant-a"); s != http.StatusUnauthorized {
		t.Fatalf("the revoked token after SIGHUP: %d", s)
	}

	// A file with a token too short to keep: nothing changes.
	if err := os.WriteFile(tokens, []byte("tenant-c short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup("tokens file not reloaded")
	if s := post(second); s != http.StatusAccepted {
		t.Fatalf("the kept token after a refused reload: %d", s)
	}
	if err := os.Remove(tokens); err != nil {
		t.Fatal(err)
	}
	hup("tokens file not reloaded")
	if s := post(second); s != http.StatusAccepted {
		t.Fatalf("the kept token after the file was removed: %d", s)
	}
	// The metrics token: replaced, then kept when the file holds no valid
	// one. (Each SIGHUP reads the removed tokens file too: two more refused.)
	metrics := func(token string) int {
		return orderlytest.Do(t, http.MethodGet, url+"/metrics", nil, "Authorization: Bearer "+token).Status
	}
	if err := os.WriteFile(metricsToken, []byte("second-metrics-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := metrics("first-metrics-token-0123"); s != http.StatusOK {
		t.Fatalf("the metrics token before SIGHUP: %d", s)
	}
	hup("metrics token file reloaded")
	if s1, s2 := metrics("first-metrics-token-0123"), metrics("second-metrics-token-0123"); s1 != http.StatusUnauthorized || s2 != http.StatusOK {
		t.Fatalf("after SIGHUP: the old metrics token %d, the new one %d", s1, s2)
	}
	if err := os.WriteFile(metricsToken, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup("metrics token file not reloaded")
	if s := metrics("second-metrics-token-0123"); s != http.StatusOK {
		t.Fatalf("the kept metrics token after a refused reload: %d", s)
	}
	for _, secret := range []string{second, "first-token-of-tenant-a", "metrics-token-0123"} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("a token was logged:\n%s", out.String())
		}
	}
	m := orderlytest.Do(t, http.MethodGet, url+"/metrics", nil, "Authorization: Bearer second-metrics-token-0123")
	for _, want := range []string{`orderly_tokens_reloads_total{result="reloaded"} 2`, `orderly_tokens_reloads_total{result="refused"} 4`} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestParseErrorsAreShort: a mistyped command line gets its error, the
// command's usage line and where its help is, not the whole help above the
// error.
func TestParseErrorsAreShort(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	for _, args := range [][]string{{"dlq", "replay", "--", "-1"}, {"bench", "--connections", "x"}, {"bogus"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("%q: %v, want a failure", args, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 5 || !strings.Contains(string(out), "orderly: error: ") || !strings.Contains(string(out), "--help\" for more information") {
			t.Errorf("%q: %d lines, want the error, the usage line and the help hint:\n%s", args, len(lines), out)
		}
	}
}

// TestVersionFlag: orderly --version prints what orderly version prints and
// exits 0, as the users of most tools expect.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	cmd, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("orderly version: %v", err)
	}
	flag, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("orderly --version: %v", err)
	}
	if !strings.HasPrefix(string(cmd), "orderly ") || string(flag) != string(cmd) {
		t.Fatalf("orderly --version printed %q, orderly version %q", flag, cmd)
	}
}

// TestNegativeValuesAreRefused: no duration of orderly's means anything
// negative, and events tail --since=-5m printed every stored event; each is
// refused while the command line is parsed, from a flag or a variable. The
// tools' counts are refused below their least too.
func TestNegativeValuesAreRefused(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	for _, args := range [][]string{
		{"events", "tail", "--since=-5m"},
		{"healthcheck", "--timeout=-1s"},
		{"dlq", "replay", "--all", "--wait=-1s"},
		{"check", "--settle=-1s"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "is negative: give 0 or more") {
			t.Errorf("%q: %v\n%s", args, err, out)
		}
	}
	// Counts too: each of these ran as if it were 0 or its default.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--requests=-5"}, "must not be negative"},
		{[]string{"bench", "--replay-keys=-1"}, "must not be negative"},
		{[]string{"bench", "--waiters=-1"}, "--waiters must not be negative"},
		{[]string{"bench", "--rounds=0"}, "--rounds must be at least 1"},
		{[]string{"check", "--orders=-5"}, "must not be negative"},
	} {
		out, err := exec.Command(bin, append(c.args, "--url", "http://127.0.0.1:1")...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%q: %v\n%s", c.args, err, out)
		}
	}
	// Not a count, but refused the same way before anything is done: a
	// healthcheck of a URL that is not HTTP said Go's "unsupported protocol
	// scheme".
	if out, err := exec.Command(bin, "healthcheck", "--url", "localhost:8080/readyz").CombinedOutput(); err == nil || !strings.Contains(string(out), "must start with http:// or https://") {
		t.Errorf("healthcheck --url localhost:8080/readyz: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "restore", "--replicas=-1", t.TempDir()).CombinedOutput(); err == nil || !strings.Contains(string(out), "--replicas must be 0") {
		t.Errorf("restore --replicas=-1: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "setup", "--nats-url", "nats://127.0.0.1:1")
	cmd.Env = append(os.Environ(), "ORDERLY_STARTUP_TIMEOUT=-2m")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "-2m is negative") || !strings.Contains(string(out), "ORDERLY_STARTUP_TIMEOUT") {
		t.Errorf("ORDERLY_STARTUP_TIMEOUT=-2m: %v\n%s", err, out)
	}
}

// TestCheckRefusesAReportItCannotWrite: orderly check with a --report it
// could not write ran its whole workload first (minutes, the flag's
// default 30 s and settling) and lost the report at the end; it is refused
// before anything is sent, naming the flag and why. (The API here does not
// exist: a check that got that far would fail on it instead.)
func TestCheckRefusesAReportItCannotWrite(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := t.TempDir()
	for _, c := range []struct{ report, want string }{
		{filepath.Join(dir, "missing", "r.json"), "--report: cannot write a file in " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{dir, "--report: " + dir + " is a directory"},
	} {
		out, err := exec.Command(bin, "check", "--report", c.report, "--url", "http://127.0.0.1:1", "-d", "1h").CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) || strings.Contains(string(out), "checking ") {
			t.Errorf("check --report %s: %v, want %q before the check starts\n%s", c.report, err, c.want, out)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the refused checks left %d files in the report's directory", len(left))
	}
}

// TestBackupAndRestoreLookAtTheDirectoryFirst: orderly restore of a
// directory that does not exist, is a file, or holds no backup, and orderly
// backup into one that holds other files, say so before they connect to
// NATS (here nothing answers: a tool that got that far would fail on the
// connection instead, as each of these did).
func TestBackupAndRestoreLookAtTheDirectoryFirst(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(dir, "missing"), "no such file or directory"},
		{file, "not a directory"},
		{dir, "not a complete backup"},
	} {
		out, err := exec.Command(bin, "restore", c.dir, "--nats-url", "nats://127.0.0.1:1").CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) || strings.Contains(string(out), "NATS") {
			t.Errorf("restore %s: %v, want %q before NATS is asked\n%s", c.dir, err, c.want, out)
		}
	}
	out, err := exec.Command(bin, "backup", dir, "--nats-url", "nats://127.0.0.1:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is not empty") || strings.Contains(string(out), "NATS") {
		t.Errorf("backup into a directory with a file: %v, want it refused before NATS is asked\n%s", err, out)
	}
}

// TestHealthcheckPrintsTheAnswerSafely: what a probed server answers
// besides 200 is printed, with the terminal escapes and controls of its
// bytes escaped (termsafe), as every tool prints what others wrote.
func TestHealthcheckPrintsTheAnswerSafely(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready \x1b]0;pwned\x07\x1b[2J"))
	}))
	defer srv.Close()
	out, err := exec.Command(bin, "healthcheck", "--url", srv.URL+"/readyz").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "answered 503: not ready") || strings.ContainsAny(string(out), "\x1b\x07") {
		t.Errorf("healthcheck of a 503 with escapes: %v\n%q", err, out)
	}
}

// TestCredentialsInitTellsOfANewRoutePassword: credentials init on the
// directory of a cluster made before its routes had a password (ADR 0024)
// writes one and says that the nodes must restart together; on a new
// directory, or once the password exists, it says nothing of it.
func TestCredentialsInitTellsOfANewRoutePassword(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "credentials")
	const restart = "restart every NATS node of the cluster at once"
	initDir := func() string {
		t.Helper()
		out, err := exec.Command(bin, "credentials", "init", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("init: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := initDir(); strings.Contains(out, restart) || !strings.Contains(out, natsauth.RoutePasswordFile) {
		t.Fatalf("init of a new directory:\n%s", out)
	}
	if err := os.Remove(filepath.Join(dir, natsauth.RoutePasswordFile)); err != nil {
		t.Fatal(err)
	}
	if out := initDir(); !strings.Contains(out, restart) {
		t.Fatalf("init of a directory without a route password:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, natsauth.RoutePasswordFile)); err != nil {
		t.Fatal(err)
	}
	if out := initDir(); strings.Contains(out, restart) {
		t.Fatalf("init once the password exists:\n%s", out)
	}
}

// TestCredentialsInitSetsTheAccountsStorageLimit: --account-max-store
// writes the ORDERLY account's JetStream storage limit into
// nats-accounts.conf, a later init without it and a service's key keep it,
// 0 removes it, and a size it cannot read, one too small to hold orders or a
// TLS host a certificate cannot name is refused before anything is written. internal/server TestAccountStorageLimitLosesNoAcceptedOrder runs
// NATS with it.
func TestCredentialsInitSetsTheAccountsStorageLimit(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "credentials")
	const reload = "reload the NATS nodes"
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	conf := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, natsauth.ConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct{ args, want string }{
		{"--account-max-store 12XB", `--account-max-store: want a size such as 512MiB, got "12XB"`},
		// A number without a unit is bytes: "10" meant as gigabytes made an
		// account that could store no order.
		{"--account-max-store 10", "--account-max-store 10 B: below 4.0 MiB"},
		{"--account-max-store 3MiB", "--account-max-store 3.0 MiB: below 4.0 MiB"},
		// Refused after the seeds were written, as "credentials: TLS host".
		{"--tls-host bad_host!", `--tls-host "bad_host!": give a DNS name or an IP address`},
	} {
		out, err := exec.Command(bin, append([]string{"credentials", "init", dir}, strings.Fields(c.args)...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Fatalf("%s: %v\n%s", c.args, err, out)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused init (%s) made the directory: %v", c.args, err)
		}
	}
	if out := run("credentials", "init", dir, "--account-max-store", "2GiB"); !strings.Contains(out, "the account ORDERLY may store 2.0 GiB") || strings.Contains(out, reload) {
		t.Fatalf("init of a new directory with a limit:\n%s", out)
	}
	const capped = "jetstream: { max_file: 2147483648 }"
	if !strings.Contains(conf(), capped) {
		t.Fatalf("no limit in the configuration:\n%s", conf())
	}
	if out := run("credentials", "init", dir); !strings.Contains(out, "may store 2.0 GiB") || strings.Contains(out, reload) || !strings.Contains(conf(), capped) {
		t.Fatalf("init without the flag did not keep the limit:\n%s\n%s", out, conf())
	}
	run("credentials", "service", "add", "billing", "--dir", dir)
	if !strings.Contains(conf(), capped) {
		t.Fatalf("a service's key dropped the limit:\n%s", conf())
	}
	if out := run("credentials", "init", dir, "--account-max-store", "3TB"); !strings.Contains(out, reload) || !strings.Contains(conf(), "max_file: 3000000000000 }") {
		t.Fatalf("a new limit:\n%s\n%s", out, conf())
	}
	if out := run("credentials", "init", dir, "--account-max-store", "0"); !strings.Contains(out, "has no JetStream storage limit") || !strings.Contains(out, reload) || strings.Contains(conf(), "max_file") {
		t.Fatalf("0 did not remove the limit:\n%s\n%s", out, conf())
	}
}

// TestServiceKeys: orderly credentials service add, list and remove on a
// credentials directory; orderly credentials init (which orderly serve runs
// at every start) keeps the services' accounts in the configuration.
// internal/natsauth TestServiceKeysKeepServicesApart tests what a key may do.
func TestServiceKeys(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	dir := filepath.Join(t.TempDir(), "credentials")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("credentials", "service", "add", "billing", "--dir", dir); err == nil || !strings.Contains(out, "orderly credentials init DIR first") {
		t.Fatalf("add before init: %v\n%s", err, out)
	}
	if out, err := run("credentials", "init", dir); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if out, err := run("credentials", "service", "list", "--dir", dir); err != nil || !strings.Contains(out, "no consumer service has a key of its own") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	seed := filepath.Join(dir, natsauth.ServicesDir, "billing.nk")
	if out, err := run("credentials", "service", "add", "billing", "--dir", dir); err != nil || !strings.Contains(out, seed) || !strings.Contains(out, "one at a time") {
		t.Fatalf("add: %v\n%s", err, out)
	}
	if st, err := os.Stat(seed); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key: %v %v, want mode 0600", st, err)
	}
	if out, err := run("credentials", "service", "add", "billing", "--dir", dir); err == nil || !strings.Contains(out, "has a key already") {
		t.Fatalf("add again: %v\n%s", err, out)
	}
	if out, err := run("credentials", "service", "add", "projector", "--dir", dir); err == nil || !strings.Contains(out, "not one of orderly's own") {
		t.Fatalf("add projector: %v\n%s", err, out)
	}
	if out, err := run("credentials", "service", "list", "--dir", dir); err != nil || !strings.Contains(out, "billing") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := run("credentials", "init", dir); err != nil {
		t.Fatalf("init again: %v\n%s", err, out)
	}
	conf := filepath.Join(dir, natsauth.ConfigFile)
	if b, err := os.ReadFile(conf); err != nil || !strings.Contains(string(b), natsauth.ServiceAccount("billing")+" {") {
		t.Fatalf("the configuration after init: %v\n%s", err, b)
	}
	if out, err := run("credentials", "service", "remove", "billing", "--dir", dir); err != nil || !strings.Contains(out, "key deleted") {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(conf); err != nil || strings.Contains(string(b), natsauth.ServiceAccount("billing")) {
		t.Fatalf("the configuration after remove: %v\n%s", err, b)
	}
	if out, err := run("credentials", "service", "remove", "billing", "--dir", dir); err == nil || !strings.Contains(out, "no such service") {
		t.Fatalf("remove again: %v\n%s", err, out)
	}
}
