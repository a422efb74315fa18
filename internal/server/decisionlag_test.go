package server_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// acceptedAhead has an API alone accept n async orders (keys prefix-0...),
// stops it, and returns its configuration: the processor that starts next on
// the same data dir finds n commands waiting, as one behind a burst does.
func acceptedAhead(t *testing.T, prefix string, n int) server.Config {
	t.Helper()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true}
	inst := orderlytest.Start(t, cfg)
	var wg sync.WaitGroup
	keys := make(chan string)
	for range 16 {
		wg.Go(func() {
			for key := range keys {
				if r := inst.PostOrder(t, key, orderlytest.Order("c-lag"), "Prefer: respond-async"); r.Status != http.StatusAccepted {
					t.Errorf("%s: %d %s", key, r.Status, r.Body)
				}
			}
		})
	}
	for i := range n {
		keys <- prefix + strconv.Itoa(i)
	}
	close(keys)
	wg.Wait()
	inst.Stop(t)
	if t.Failed() {
		t.FailNow()
	}
	cfg.Roles = server.DefaultRoles
	return cfg
}

// storedEvents is how many events ORDER_EVENTS holds now.
func storedEvents(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	return orderlytest.Stored(t, js, events.EventStream)
}

// behindALoad starts orderly with the decision lag, n commands behind
// (acceptedAhead) and async orders coming in (intakeLoad, keys
// prefix-load-0...), which stop ends; the test's end stops them too.
func behindALoad(t *testing.T, prefix string, n int, lag time.Duration) (*orderlytest.Instance, jetstream.JetStream, func() int) {
	t.Helper()
	cfg := acceptedAhead(t, prefix, n)
	cfg.DecisionLag = lag
	inst := orderlytest.Start(t, cfg)
	stop := intakeLoad(t, inst, prefix+"load-")
	t.Cleanup(func() { stop() })
	return inst, inst.JetStream(t), stop
}

// intakeLoad posts async orders (keys prefix-0...) from 8 clients, each
// about every 5 ms, until the returned stop (again: a no-op), which returns how many were accepted.
func intakeLoad(t *testing.T, inst *orderlytest.Instance, prefix string) (stop func() int) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		next     atomic.Int64
		accepted atomic.Int64
		done     = make(chan struct{})
		once     sync.Once
	)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				key := prefix + strconv.FormatInt(next.Add(1)-1, 10)
				r, err := orderlytest.TryDo(http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-load"),
					"Content-Type: application/json", "Idempotency-Key: "+key, "Prefer: respond-async")
				if err != nil || r.Status != http.StatusAccepted {
					t.Errorf("%s: %d %s %v", key, r.Status, r.Body, err)
					return
				}
				accepted.Add(1)
				time.Sleep(5 * time.Millisecond) // a steady intake, not a flood the suite's other tests would wait behind
			}
		})
	}
	return func() int {
		once.Do(func() { close(done) })
		wg.Wait()
		return int(accepted.Load())
	}
}

// allDecided waits until ORDER_EVENTS holds n events: the load leaves a
// backlog of thousands, more than orderlytest's settling waits for.
func allDecided(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	orderlytest.Eventually(t, 2*time.Minute, "every order decided", func() bool { return storedEvents(t, js) >= uint64(n) })
}

// everyKeyOnce checks that each of the keys prefix-0 to prefix-(n-1) has
// exactly one order.
func everyKeyOnce(t *testing.T, counts map[string]int, prefix string, n int) {
	t.Helper()
	for i := range n {
		if c := counts[idempotency.KeyHash(api.DefaultTenant, prefix+strconv.Itoa(i))]; c != 1 {
			t.Fatalf("%s%d: %d orders", prefix, i, c)
		}
	}
}

// TestDecisionLagYieldsUntilSomeoneWaits: with --decision-lag, a processor
// behind its commands leaves the cores to the API while orders come in and
// nobody waits; a sync POST ends the pause at once (its answer comes long
// before the lag is over), and every command is then decided once.
func TestDecisionLagYieldsUntilSomeoneWaits(t *testing.T) {
	t.Parallel()
	const n = 300
	inst, js, stop := behindALoad(t, "lag-wait-", n, 10*time.Minute)
	orderlytest.Eventually(t, 10*time.Second, "a first group decided", func() bool { return storedEvents(t, js) > 0 })
	time.Sleep(time.Second)
	if got := storedEvents(t, js); got >= n {
		t.Fatalf("%d events while the API took orders in and nobody waited, with %d commands behind: the processor did not yield", got, n)
	}
	if y := inst.Metric(t, `orderly_pipeline_yielded_seconds_total{pipeline="processor"}`); y <= 0 {
		t.Fatalf("yielded %v s while behind", y)
	}

	// While it pauses, pending answers tell clients to come back when the
	// decision may be there: the lag (600 s), not 1 s. The pause ends
	// between two groups for a moment, hence a few tries.
	paused, tries := false, 0
	for ; tries < 20 && !paused; tries++ {
		a := inst.PostOrder(t, "lag-wait-async-"+strconv.Itoa(tries), orderlytest.Order("c-async"), "Prefer: respond-async")
		if a.Status != http.StatusAccepted {
			t.Fatalf("async POST: %d %s", a.Status, a.Body)
		}
		g := orderlytest.Do(t, http.MethodGet, inst.URL+a.Header.Get("Location"), nil)
		// The order's GET says what is left of the lag: just accepted, about all of it.
		left, _ := strconv.Atoi(g.Header.Get("Retry-After"))
		paused = a.Header.Get("Retry-After") == "600" && left >= 590 && left <= 600
	}
	if !paused {
		t.Fatal("no 202 with Retry-After: 600 (the lag) and pending order with what is left of it while the processor paused")
	}

	start := time.Now()
	r := inst.PostOrder(t, "lag-wait-sync", orderlytest.Order("c-sync"), "Prefer: wait=20")
	loaded := stop()
	if r.Status != http.StatusCreated {
		t.Fatalf("sync POST behind a yielding processor: %d %s after %s, want 201 (a waiting request must end the pause)", r.Status, r.Body, time.Since(start))
	}
	allDecided(t, js, n+loaded+1+tries)
	counts := orderlytest.CreatedByKey(t, js)
	everyKeyOnce(t, counts, "lag-wait-", n)
	everyKeyOnce(t, counts, "lag-wait-load-", loaded)
	everyKeyOnce(t, counts, "lag-wait-async-", tries)
	if len(counts) != n+loaded+1+tries {
		t.Fatalf("%d keys with orders, want %d", len(counts), n+loaded+1+tries)
	}
	// Nothing behind: an order is decided at once, and its 202 says so.
	if a := inst.PostOrder(t, "lag-wait-after", orderlytest.Order("c-async"), "Prefer: respond-async"); a.Status != http.StatusAccepted || a.Header.Get("Retry-After") != "1" {
		t.Fatalf("async POST with nothing behind: %d, Retry-After %q, want 202 with 1", a.Status, a.Header.Get("Retry-After"))
	}
}

// TestDecisionLagBoundsThePause: while orders keep coming in and nobody
// waits, the commands of a yielding processor are decided once they are as
// old as the lag.
func TestDecisionLagBoundsThePause(t *testing.T) {
	t.Parallel()
	const n = 300
	_, js, stop := behindALoad(t, "lag-bound-", n, 2*time.Second)
	orderlytest.Eventually(t, 30*time.Second, "the commands behind decided, orders still coming in, nobody waiting", func() bool {
		return storedEvents(t, js) >= n
	})
	loaded := stop()
	allDecided(t, js, n+loaded)
	counts := orderlytest.CreatedByKey(t, js)
	everyKeyOnce(t, counts, "lag-bound-", n)
	everyKeyOnce(t, counts, "lag-bound-load-", loaded)
}

// TestDecisionLagLeavesAnIdleAPIAlone: with nothing coming in, a processor
// behind its commands does not yield: the cores are free, and holding the
// decisions back would only delay them.
func TestDecisionLagLeavesAnIdleAPIAlone(t *testing.T) {
	t.Parallel()
	const n = 300
	cfg := acceptedAhead(t, "lag-idle-", n)
	cfg.DecisionLag = 10 * time.Minute
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	orderlytest.Eventually(t, 20*time.Second, "the commands behind decided with no intake", func() bool { return storedEvents(t, js) >= n })
	everyKeyOnce(t, orderlytest.CreatedByKey(t, js), "lag-idle-", n)
}

// TestDecisionLagNeedsTheAPIBeside: a processor alone cannot see who waits,
// so it refuses the lag; a negative lag is refused.
func TestDecisionLagNeedsTheAPIBeside(t *testing.T) {
	t.Parallel()
	alone := server.DefaultConfig()
	alone.Roles = server.Roles{Processor: true}
	alone.DecisionLag = time.Second
	if err := alone.Validate(); err == nil || !strings.Contains(err.Error(), "--decision-lag needs the api and processor roles") {
		t.Fatalf("processor alone with a decision lag: %v", err)
	}
	neg := server.DefaultConfig()
	neg.DecisionLag = -time.Second
	if err := neg.Validate(); err == nil || !strings.Contains(err.Error(), "--decision-lag must not be negative") {
		t.Fatalf("negative decision lag: %v", err)
	}
	ok := server.DefaultConfig()
	ok.DecisionLag = 8 * time.Second
	if err := ok.Validate(); err != nil {
		t.Fatalf("serve with a decision lag: %v", err)
	}
}
