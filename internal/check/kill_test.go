package check_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/check"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestKill9MidLoad kills `orderly serve` with SIGKILL twice in the middle of
// the checker's workload and restarts it on the same data dir; the checker
// finds nothing lost and nothing duplicated: every order answered 201 or 202
// survived the kills. It runs with each form of order ID (serve --order-ids):
// with keyed IDs a retry stored past the duplicate window while the first
// command is undecided loses the key and stores no event, and its Location
// answers 303 to the holder, which the checker follows. And with --fsync
// group, whose answers wait for orderly's own sync rounds (ADR 0012).
func TestKill9MidLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a binary; run without -short")
	}
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	for _, run := range []struct{ ids, fsync string }{{"nonce", "1s"}, {"keyed", "1s"}, {"keyed", "group"}} {
		t.Run(run.ids+"/fsync="+run.fsync, func(t *testing.T) { kill9MidLoad(t, bin, run.ids, run.fsync) })
	}
}

func kill9MidLoad(t *testing.T, bin, orderIDs, fsync string) {
	httpPort, natsPort := orderlytest.FreePort(t), orderlytest.FreePort(t)
	dataDir := t.TempDir()
	p := &orderlytest.Process{T: t, Bin: bin, URL: fmt.Sprintf("http://127.0.0.1:%d", httpPort), Args: []string{"serve",
		"--data-dir", dataDir, "--http-addr", "127.0.0.1:" + strconv.Itoa(httpPort),
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort), "--dedup-window", "2s", "--order-ids", orderIDs, "--fsync", fsync}}
	p.Start()
	t.Cleanup(p.Kill9)

	type result struct {
		rep *check.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := check.Run(context.Background(), check.Config{
			URLs: []string{p.URL}, NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort), Clients: 12,
			NATSCredentials: jsstore.Credentials{NkeyFile: filepath.Join(dataDir, "credentials", natsauth.SeedFile(natsauth.Operator))},
			Duration:        12 * time.Second, RetryDelay: 3 * time.Second, Settle: 40 * time.Second,
			RequestTimeout: 5 * time.Second,
		})
		done <- result{rep, err}
	}()
	for _, at := range []time.Duration{3 * time.Second, 4 * time.Second} {
		time.Sleep(at)
		p.Kill9()
		time.Sleep(500 * time.Millisecond)
		restart := time.Now()
		p.Start()
		t.Logf("recovery: ready %s after the restart", time.Since(restart).Round(10*time.Millisecond))
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
