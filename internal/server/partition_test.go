package server_test

import (
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/check"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// readiness samples an API's /readyz every 100 ms and keeps when it was
// ready and when not.
type readiness struct {
	mu      sync.Mutex
	samples []sample
	stop    chan struct{}
	done    chan struct{}
}

type sample struct {
	at    time.Time
	ready bool
}

func watchReadiness(url string) *readiness {
	r := &readiness{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			resp, err := orderlytest.TryDo(http.MethodGet, url+"/readyz", nil)
			r.mu.Lock()
			r.samples = append(r.samples, sample{time.Now(), err == nil && resp.Status == http.StatusOK})
			r.mu.Unlock()
			select {
			case <-r.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return r
}

// sofar are the samples so far.
func (r *readiness) sofar() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sample(nil), r.samples...)
}

func (r *readiness) end() []sample {
	close(r.stop)
	<-r.done
	return r.samples
}

// firstAfter is the time of the first sample at or after from whose
// readiness is ready, and whether there is one.
func firstAfter(samples []sample, from time.Time, ready bool) (time.Time, bool) {
	for _, s := range samples {
		if !s.at.Before(from) && s.ready == ready {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// TestPartitionUnderCheck cuts the ORDER_COMMANDS leader of a three-node R3
// cluster off from the other two nodes for 40 s (the routes between them drop
// every byte, as a network that loses every packet; no connection is
// closed), while one API is connected to that node (given its URL alone: it
// learns the others from the node) and another to the other two, and the
// checker's clients send their requests to both in turn, as behind a load
// balancer, so that a request the cut-off API cannot store is retried and may
// reach the other. The checker finds no violation (nothing lost, nothing made
// twice, every retry answered as the first). The cut-off API says it is not
// ready within 10 s, so that a load balancer stops sending it requests; once
// its node has said for 10 s that it lost its cluster, it moves to another
// node and is ready again, within 30 s of the cut and before the heal, and
// answers every request of a probe from then on. The other API answers every
// request of a probe, slowed for at most 20 s while the majority elects new
// leaders (more when raft needs another round of its election: slowedBound); how long the majority took to elect a leader of ORDER_COMMANDS is
// logged, and a request that election left without one for longer than its
// budget (--nats-timeout) allows may get the honest 503 instead (as in
// TestFailoverUnderCheck: a failed round of raft's election adds 4 to 9 s).
func TestPartitionUnderCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("partitions a cluster for a minute; run without -short")
	}
	// Not parallel: it measures failover, not the CPU the other tests take.
	cluster := orderlytest.StartPartitionableCluster(t, orderlytest.ClusterPorts(t, 3))
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	js := cluster.JetStream(t)
	cutName := leaderOf(t, js, events.CommandStream)
	cut := cluster.Index(cutName)
	var rest []string
	for i := 0; i < 3; i++ {
		if i != cut {
			rest = append(rest, cluster.NodeURL(i))
		}
	}
	// The majority's view of the election: js may sit on the node cut off.
	jsRest, err := jsstore.DialJetStream(strings.Join(rest, ","), orderlytest.As(cluster.Creds, natsauth.Operator), "orderly-test-majority")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(jsRest.Conn().Close)
	var logA orderlytest.Buffer
	var budget time.Duration // --nats-timeout, the default
	start := func(urls string, logger *slog.Logger) *orderlytest.Instance {
		cfg := orderlytest.Config(t)
		orderlytest.Attach(&cfg, urls, cluster.Creds, natsauth.Serve)
		budget = cfg.App.RequestTimeout
		return orderlytest.StartLogged(t, cfg, logger)
	}
	a := start(cluster.NodeURL(cut), slog.New(slog.NewTextHandler(&logA, &slog.HandlerOptions{Level: slog.LevelWarn})))
	b := start(strings.Join(rest, ","), orderlytest.Logger())

	checked := runCheck(t, check.Config{URLs: []string{a.URL, b.URL}, NATSURL: cluster.URLs(), NATSCredentials: a.Operator(),
		Clients: 4, Duration: 60 * time.Second, Settle: 60 * time.Second, RequestTimeout: 30 * time.Second})
	readyA := watchReadiness(a.URL)
	p, pa := startProbe(t, b.URL), startProbe(t, a.URL)

	time.Sleep(5 * time.Second)
	const down = 50 * time.Second
	cutAt := time.Now()
	cluster.Partition(cut)
	electedRest := elected(t, jsRest, cutName, events.CommandStream)
	time.Sleep(down)
	healAt := time.Now()
	cluster.Heal(cut)
	rep := checked()
	hits, hitsA := p.end(), pa.end()
	samples := readyA.end()
	commands := electedRest("the partition")[events.CommandStream]

	// The workload met the partition: requests to the cut-off API that it
	// answered late (over a second) or with an error; some of those orders
	// were answered by the other API at their retry.
	var met, hops, onA, onB int
	for _, o := range rep.Details {
		failedOnA := false
		for _, at := range o.Attempts {
			switch at.API {
			case a.URL:
				onA++
				failed := at.Status >= 500 || (at.Status == 0 && !at.Dropped)
				if failed || at.Latency > time.Second {
					met++
				}
				failedOnA = failedOnA || failed
			case b.URL:
				onB++
				if failedOnA && at.Status > 0 && at.Status < 500 {
					hops++
					failedOnA = false
				}
			}
		}
	}
	t.Logf("checker: %d orders, %d requests (%d to the cut-off API, %d to the other), outcomes %v; %d requests to the cut-off API answered late or failed, %d orders answered by the other API after the cut-off one failed",
		rep.Orders, rep.Requests, onA, onB, rep.Outcomes, met, hops)
	if met == 0 {
		t.Error("no request of the checker's to the cut-off API was slowed or failed: the workload did not meet the partition")
	}

	notReady, ok := firstAfter(samples, cutAt, false)
	if !ok || notReady.Sub(cutAt) > 10*time.Second {
		t.Errorf("the cut-off API did not say it was not ready within 10 s of the partition (first not ready: %v after)", notReady.Sub(cutAt))
	} else {
		t.Logf("the cut-off API not ready %s after the partition", notReady.Sub(cutAt).Round(100*time.Millisecond))
	}
	// The cut-off API moved to another node (its own says for 10 s that it
	// lost its cluster; it says so 6 to 12 s after the cut) and serves again
	// before the network heals.
	back, ok := firstAfter(samples, notReady, true)
	if !ok || back.After(healAt) || back.Sub(cutAt) > 40*time.Second {
		t.Errorf("the cut-off API was not ready again within 40 s of the partition, before the heal %s after it (ready again: %v, %s after it)",
			down, ok, back.Sub(cutAt).Round(100*time.Millisecond))
	} else {
		errsA, slowA, nA := window(hitsA, back, healAt)
		t.Logf("the cut-off API ready again %s after the partition; until the heal %d probe requests, %d errors, slowed for %s",
			back.Sub(cutAt).Round(100*time.Millisecond), nA, len(errsA), slowA.Round(100*time.Millisecond))
		for _, e := range errsA {
			t.Errorf("the moved API answered an error, sent %s after the partition, after %s: %d %s", e.at.Sub(cutAt).Round(time.Millisecond), e.took.Round(time.Millisecond), e.status, strings.TrimSpace(e.code))
		}
		if nA < 2*probeWorkers {
			t.Errorf("only %d probe requests to the moved API before the heal", nA)
		}
	}
	moved := false
	for line := range strings.Lines(logA.String()) {
		if strings.Contains(line, "the NATS server has lost its cluster") {
			moved = moved || strings.Contains(line, "moving to another server")
			t.Logf("the cut-off API: %s", strings.TrimSpace(line))
		}
	}
	if !moved {
		t.Errorf("the cut-off API did not log its move:\n%s", logA.String())
	}
	if n := a.Metric(t, "orderly_nats_node_moves_total"); n < 1 {
		t.Errorf("the cut-off API counts %v moves", n)
	}
	if n := b.Metric(t, "orderly_nats_node_moves_total"); n != 0 {
		t.Errorf("the other API counts %v moves", n)
	}

	errs, slowFor, n := window(hits, cutAt, healAt)
	t.Logf("the other API during the partition: %d probe requests, %d errors, slowed for %s", n, len(errs), slowFor.Round(100*time.Millisecond))
	for _, e := range errs {
		sent := e.at.Sub(cutAt)
		if excused(e, sent, commands, budget) {
			// The majority elected later than the request's budget allows;
			// the checker's retries find the order made once or not at all.
			t.Logf("the other API: a request sent %s after the partition had no ORDER_COMMANDS leader within its budget of %s: %d %s", sent.Round(time.Millisecond), budget, e.status, strings.TrimSpace(e.code))
			continue
		}
		t.Errorf("the other API answered an error, sent %s after the partition, after %s: %d %s", sent.Round(time.Millisecond), e.took.Round(time.Millisecond), e.status, strings.TrimSpace(e.code))
	}
	if bound := slowedBound(commands); slowFor > bound {
		t.Errorf("the other API was slowed for %s, more than %s", slowFor, bound)
	}
	if n < 2*probeWorkers {
		t.Errorf("only %d probe requests to the other API during the partition", n)
	}
	caughtUp(t, js)
}
