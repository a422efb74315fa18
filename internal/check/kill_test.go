package check_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/check"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// buildOrderly builds the orderly binary once for the test.
func buildOrderly(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "orderly")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/orderly")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

// serveProcess is `orderly serve` as a child process that can be killed -9.
type serveProcess struct {
	t    *testing.T
	bin  string
	args []string
	url  string
	cmd  *exec.Cmd
}

func (p *serveProcess) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	if os.Getenv("ORDERLY_TEST_LOG") == "" {
		p.cmd.Stdout, p.cmd.Stderr = nil, nil
	}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, err := http.Get(p.url + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatal("orderly serve did not get ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *serveProcess) kill9() {
	_ = p.cmd.Process.Kill() // SIGKILL: no shutdown, no flush
	_, _ = p.cmd.Process.Wait()
}

// TestKill9MidLoad kills `orderly serve` with SIGKILL twice in the middle of
// the checker's workload and restarts it on the same data dir; the checker
// finds nothing lost and nothing duplicated: every order answered 201 or 202
// survived the kills.
func TestKill9MidLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a binary; run without -short")
	}
	t.Parallel()
	bin := buildOrderly(t)
	httpPort, natsPort := orderlytest.FreePort(t), orderlytest.FreePort(t)
	dataDir := t.TempDir()
	p := &serveProcess{t: t, bin: bin, url: fmt.Sprintf("http://127.0.0.1:%d", httpPort), args: []string{"serve",
		"--data-dir", dataDir, "--http-addr", "127.0.0.1:" + strconv.Itoa(httpPort),
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort), "--dedup-window", "2s"}}
	p.start()
	t.Cleanup(p.kill9)

	type result struct {
		rep *check.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := check.Run(context.Background(), check.Config{
			URL: p.url, NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort), Clients: 12,
			NATSCredentials: jsstore.Credentials{NkeyFile: filepath.Join(dataDir, "credentials", natsauth.SeedFile(natsauth.Operator))},
			Duration:        12 * time.Second, RetryDelay: 3 * time.Second, Settle: 40 * time.Second,
			RequestTimeout: 5 * time.Second,
		})
		done <- result{rep, err}
	}()
	for _, at := range []time.Duration{3 * time.Second, 4 * time.Second} {
		time.Sleep(at)
		p.kill9()
		time.Sleep(500 * time.Millisecond)
		p.start()
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	for _, v := range res.rep.Violations {
		t.Errorf("%s: %s %s", v.Rule, v.Key, v.Detail)
	}
	if res.rep.Outcomes["no answer"] == 0 {
		t.Fatalf("no request went unanswered: the kills did not hit the workload (%v)", res.rep.Outcomes)
	}
	t.Logf("%d orders, %d requests, outcomes %v", res.rep.Orders, res.rep.Requests, res.rep.Outcomes)
}
