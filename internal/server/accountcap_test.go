package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestAccountStorageLimitLosesNoAcceptedOrder: the ORDERLY account has a
// JetStream storage limit (max_file, as `orderly credentials init
// --account-max-store` writes it) and reaches it under async load. The
// stream then refuses each write with "resource limits exceeded for account"
// (10002): a fault of the store, like a full disk, not of the order. orderly
// answers 503, holds the commands it accepted, and, once the limit is raised
// (here with a restart of NATS), decides every order it answered 202 once,
// under the order ID it was given; none is given up as rejected.
func TestAccountStorageLimitLosesNoAcceptedOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	creds := orderlytest.NewCredentials(t)
	if err := creds.SetAccountMaxStore(4 << 20); err != nil {
		t.Fatal(err)
	}
	port := orderlytest.FreePort(t)
	url, stop := orderlytest.ExternalNATS(t, dir, port, creds)
	orderlytest.Setup(t, url, creds, 0)
	cfg := orderlytest.Config(t)
	orderlytest.Attach(&cfg, url, creds, natsauth.Serve)
	var log orderlytest.Buffer
	inst := orderlytest.StartLogged(t, cfg, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})))

	load := startLoad(t, inst.URL, "acap")
	orderlytest.Eventually(t, 3*time.Minute, "the account's limit to be reached", func() bool { return load.refused.Load() > 100 })
	// Answered at once, as on a full disk: the room does not come back
	// within the request's budget.
	begin := time.Now()
	r := inst.PostOrder(t, "acap-at-once", orderlytest.Order("c-acap"), "Prefer: respond-async")
	if took := time.Since(begin); r.Status != http.StatusServiceUnavailable || r.Problem(t)["code"] != "service_unavailable" || took > 2*time.Second {
		t.Fatalf("a new order in a full account: %d after %s: %s", r.Status, took.Round(time.Millisecond), r.Body)
	}
	// Not ready while full, saying why, for 10 s: long enough for the code
	// before ADR 0032 to count thousands of deliveries as failed (12,080 in
	// 25 s), on the way to giving them up.
	notReadyFor(t, inst.URL, 10*time.Second, "the account was full")
	accepted := load.end()
	if r, _ := readyz(inst.URL); !strings.Contains(string(r.Body), "storage is at its limit") {
		t.Fatalf("/readyz does not say the account is full: %s", r.Body)
	}
	if used, limit := inst.Metric(t, "orderly_account_store_bytes"), inst.Metric(t, "orderly_account_store_limit_bytes"); limit != 4<<20 || used < limit-1<<20 {
		t.Fatalf("the account's storage reported as %v of %v, want close to 4 MiB of 4 MiB", used, limit)
	}
	if len(accepted) == 0 {
		t.Fatal("no order accepted: the test needs load")
	}
	t.Logf("at the limit: %d accepted, %d refused with 503", len(accepted), load.refused.Load())
	heldNotRetried(t, inst, &log)

	stop()
	if err := creds.SetAccountMaxStore(1 << 30); err != nil {
		t.Fatal(err)
	}
	orderlytest.ExternalNATS(t, dir, port, creds)
	raised := time.Now()
	orderlytest.Eventually(t, 30*time.Second, "ready once the limit is raised", func() bool { _, ok := readyz(inst.URL); return ok })
	if r := inst.PostOrder(t, "after-acap", orderlytest.Order("c-after"), "Prefer: wait=20"); r.Status != http.StatusCreated {
		t.Fatalf("a new order once the limit is raised: %d %s\n%s", r.Status, r.Body, log.String())
	}
	if limit := inst.Metric(t, "orderly_account_store_limit_bytes"); limit != 1<<30 {
		t.Fatalf("the raised limit reported as %v", limit)
	}
	decidedOnce(t, inst, accepted)
	t.Logf("every accepted order decided %s after the limit was raised", time.Since(raised).Round(100*time.Millisecond))
}

// TestClusterAccountStorageLimitKeepsTheLeaders: on an R3 cluster, the
// account's storage limit of `orderly credentials init --account-max-store`
// (every copy counted) is reached under async load. Unlike a node's own cap
// (TestClusterStoreCapLosesNoAcceptedOrder), the streams keep their leaders:
// only the writes are refused. orderly answers 503, says it is not ready
// and why, and reports the account's usage against the limit; a raised
// limit, taken with a reload of the nodes, brings it back without a restart,
// and every order it answered 202 is decided once.
func TestClusterAccountStorageLimitKeepsTheLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a cluster's account under load; run without -short")
	}
	t.Parallel()
	cluster := orderlytest.StartLimitedCluster(t, orderlytest.ClusterPorts(t, 3), 1<<30)
	const limit = 12 << 20
	if err := cluster.Creds.SetAccountMaxStore(limit); err != nil {
		t.Fatal(err)
	}
	cluster.Limit(1 << 30) // the same node cap: a reload, which reads the accounts again
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	var log orderlytest.Buffer
	inst := startAttached(t, cluster, &log, slog.LevelWarn)
	orderlytest.Eventually(t, 30*time.Second, "the limit reported", func() bool {
		return inst.Metric(t, "orderly_account_store_limit_bytes") == limit
	})

	load := startLoad(t, inst.URL, "clcap")
	orderlytest.Eventually(t, 3*time.Minute, "the account's limit to be reached", func() bool { return load.refused.Load() > 100 })
	orderlytest.Eventually(t, 30*time.Second, "not ready at the limit", func() bool { _, ok := readyz(inst.URL); return !ok })
	time.Sleep(5 * time.Second)
	accepted := load.end()
	t.Logf("at the limit: %d accepted, %d refused with 503", len(accepted), load.refused.Load())
	if len(accepted) == 0 {
		t.Fatal("no order accepted: the test needs load")
	}
	heldNotRetried(t, inst, &log)
	js := cluster.JetStream(t)
	var copies uint64
	for _, name := range []string{events.CommandStream, events.EventStream, events.DeadLetterStream, jsstore.ResultsStream} {
		leaderOf(t, js, name) // fails the test when the stream has none
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		copies += 3 * s.CachedInfo().State.Bytes
	}
	used := inst.Metric(t, "orderly_account_store_bytes")
	t.Logf("account: %.0f of %d bytes used; the streams hold %d bytes in their three copies", used, limit, copies)
	if used < limit-1<<20 || float64(copies) < 0.9*used {
		t.Fatalf("the account's usage %.0f of %d, against %d bytes in the streams' three copies: the limit does not count every copy", used, limit, copies)
	}

	if err := cluster.Creds.SetAccountMaxStore(1 << 30); err != nil {
		t.Fatal(err)
	}
	cluster.Limit(1 << 30)
	raised := time.Now()
	orderlytest.Eventually(t, 60*time.Second, "ready once the limit is raised", func() bool { _, ok := readyz(inst.URL); return ok })
	readyAfter := time.Since(raised)
	if r := inst.PostOrder(t, "after-clcap", orderlytest.Order("c-after"), "Prefer: wait=20"); r.Status != http.StatusCreated {
		t.Fatalf("a new order once the limit is raised: %d %s\n%s", r.Status, r.Body, log.String())
	}
	decidedOnce(t, inst, accepted)
	t.Logf("recovery: ready %s after the reload, every accepted order decided %s after", readyAfter.Round(100*time.Millisecond), time.Since(raised).Round(100*time.Millisecond))
}

// heldNotRetried: a write refused for want of room says nothing about the
// command, so the processor holds it (a fault) instead of counting it as a
// failed delivery, which after MaxAttempts would be given up as
// processing_failed.
func heldNotRetried(t *testing.T, inst *orderlytest.Instance, log *orderlytest.Buffer) {
	t.Helper()
	for _, outcome := range []string{"retried", "dead_lettered"} {
		if n := inst.Metric(t, `orderly_pipeline_messages_total{outcome="`+outcome+`",pipeline="processor"}`); n != 0 {
			t.Fatalf("%v commands %s while the account was full\n%s", n, outcome, log.String())
		}
	}
	if n := inst.Metric(t, `orderly_pipeline_faults_total{pipeline="processor"}`); n == 0 {
		t.Fatalf("the processor never met the account's limit: the test needs it to\n%s", log.String())
	}
}
