package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/check"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// probe sends sync orders with fresh keys to the APIs and records when each
// started, how long it took and what it got.
type probe struct {
	mu   sync.Mutex
	hits []hit
	stop chan struct{}
	wg   sync.WaitGroup
}

const probeWorkers = 3

// slowBound is how long after a kill requests may still be slowed (over a
// second each), and feedDown how long the feed's node stays down, longer.
const (
	slowBound = 20 * time.Second
	feedDown  = 25 * time.Second
)

// slowedBound is how long after a kill requests may still be slowed when
// the slowest election of a new leader took elected (-1: none): slowBound,
// which counts 9 s for it (nats-server's longest election timeout), or,
// when raft needed another round, the election and the rest of slowBound
// after it (the attempt cap, the heartbeats, CPU contention): what orderly
// adds to an election is bounded, not how long raft takes to hold one. It
// stays below feedDown, so that a feed that never came back (every waiting
// request slow until the node's restart) still fails the failover test.
func slowedBound(elected time.Duration) time.Duration {
	const election = 9 * time.Second
	return min(max(slowBound, elected+slowBound-election), feedDown-time.Second)
}

// slowest is the longest of the elections (-1 when one had none).
func slowest(elections map[string]time.Duration) time.Duration {
	var m time.Duration
	for _, d := range elections {
		if d < 0 {
			return -1
		}
		m = max(m, d)
	}
	return m
}

type hit struct {
	url    string
	at     time.Time
	took   time.Duration
	status int
	code   string
}

func startProbe(t *testing.T, urls ...string) *probe {
	p := &probe{stop: make(chan struct{})}
	for w := 0; w < probeWorkers; w++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-p.stop:
					return
				default:
				}
				url := urls[(w+i)%len(urls)]
				key := fmt.Sprintf("probe-%d-%d", w, i)
				begin := time.Now()
				r, err := orderlytest.TryDo(http.MethodPost, url+"/v1/orders", orderlytest.Order("probe"),
					"Content-Type: application/json", "Idempotency-Key: "+key)
				h := hit{url: url, at: begin, took: time.Since(begin), status: r.Status}
				if err != nil {
					h.code = "transport: " + err.Error()
				} else if r.Status >= 500 {
					h.code = string(r.Body)
				}
				p.mu.Lock()
				p.hits = append(p.hits, h)
				p.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return p
}

func (p *probe) end() []hit {
	close(p.stop)
	p.wg.Wait()
	sort.Slice(p.hits, func(i, j int) bool { return p.hits[i].at.Before(p.hits[j].at) })
	return p.hits
}

// window measures, among the requests started in [from, to): the errors
// (status 0 or 5xx), and the time from `from` until the last slow request
// (over a second) ended.
func window(hits []hit, from, to time.Time) (errs []hit, slowFor time.Duration, n int) {
	for _, h := range hits {
		if h.at.Before(from) || !h.at.Before(to) {
			continue
		}
		n++
		if h.status == 0 || h.status >= 500 {
			errs = append(errs, h)
		}
		if h.took > time.Second {
			slowFor = max(slowFor, h.at.Add(h.took).Sub(from))
		}
	}
	return errs, slowFor, n
}

// runCheck runs orderly check with cfg on a goroutine of its own. wait
// returns its report, once the check ends, after failing the test on its
// error and reporting each violation it found as an error of the test.
func runCheck(t *testing.T, cfg check.Config) (wait func() *check.Report) {
	done := make(chan struct{})
	var rep *check.Report
	var err error
	go func() {
		defer close(done)
		rep, err = check.Run(context.Background(), cfg)
	}()
	return func() *check.Report {
		t.Helper()
		<-done
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range rep.Violations {
			t.Errorf("checker: %s: %s %s", v.Rule, v.Key, v.Detail)
		}
		return rep
	}
}

// startAttached starts orderly serve on the cluster's URLs as its serve
// user, logging at level into log.
func startAttached(t *testing.T, cluster *orderlytest.ProcessCluster, log *orderlytest.Buffer, level slog.Level) *orderlytest.Instance {
	cfg := orderlytest.Config(t)
	orderlytest.Attach(&cfg, cluster.URLs(), cluster.Creds, natsauth.Serve)
	return orderlytest.StartLogged(t, cfg, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: level})))
}

func leaderOf(t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("leader of %s: %+v %v", stream, info, err)
	}
	return info.Cluster.Leader
}

// elected watches, from now on, for a leader of each stream other than the
// node killed. Its wait returns how long each took (-1: none within a
// minute), having logged them: what a request that needs the stream waits
// for at the least. It reads the leader from the stream's info, which the
// nodes left may answer only once they have a meta leader too (10008
// meanwhile), so when the node lost led the meta group as well, the time
// logged can be longer than the stream's own election (a partition logged
// 5 s once while the other API was not slowed at all, which this would
// explain; the run did not log the meta leader).
func elected(t *testing.T, js jetstream.JetStream, killed string, streams ...string) (wait func(what string) map[string]time.Duration) {
	begin := time.Now()
	took := make([]time.Duration, len(streams))
	var wg sync.WaitGroup
	for i, name := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took[i] = -1
			for time.Since(begin) < time.Minute {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				info, err := js.Stream(ctx, name)
				cancel()
				if err == nil && info.CachedInfo().Cluster != nil && info.CachedInfo().Cluster.Leader != "" && info.CachedInfo().Cluster.Leader != killed {
					took[i] = time.Since(begin)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	return func(what string) map[string]time.Duration {
		wg.Wait()
		byStream := make(map[string]time.Duration, len(streams))
		var b strings.Builder
		for i, name := range streams {
			byStream[name] = took[i]
			if took[i] < 0 {
				fmt.Fprintf(&b, " %s: none within a minute;", name)
			} else {
				fmt.Fprintf(&b, " %s %s;", name, took[i].Round(100*time.Millisecond))
			}
		}
		t.Logf("%s: a leader other than %s after%s", what, killed, strings.TrimSuffix(b.String(), ";"))
		return byStream
	}
}

// beyondBudget says whether a probe request sent at sent after a kill could
// not have been stored within the budget, because ORDER_COMMANDS had no
// leader until commands after the kill (-1: none): the request's attempt
// after the election comes within a pause of at most a second and its
// round trip, so an election later than budget - 1.5 s after the request
// leaves it nothing. nats-server elects in 4 to 9 s mostly, but a round
// that fails (two candidates at once) starts another one 4 to 9 s later.
func beyondBudget(sent, commands, budget time.Duration) bool {
	return commands < 0 || commands > sent+budget-1500*time.Millisecond
}

// excused says whether a probe error, sent at sent after a leader of
// ORDER_COMMANDS was lost, is the honest answer to an election that
// outlasted its budget: a 503 that says the order may or may not have been
// stored (outcome_unknown) or that nothing was (service_unavailable), for a
// request that beyondBudget leaves nothing. An error within the budget, or
// any other answer, is not.
func excused(e hit, sent, commands, budget time.Duration) bool {
	honest := e.status == http.StatusServiceUnavailable && (strings.Contains(e.code, "outcome_unknown") || strings.Contains(e.code, "service_unavailable"))
	return honest && beyondBudget(sent, commands, budget)
}

// caughtUp waits until every replica of every stream is current again, so
// that the next kill leaves a current quorum to elect from.
func caughtUp(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	orderlytest.Eventually(t, 60*time.Second, "the restarted node to catch up", func() bool {
		for _, name := range []string{events.CommandStream, events.EventStream, events.DeadLetterStream, jsstore.ResultsStream} {
			s, err := js.Stream(context.Background(), name)
			if err != nil {
				return false
			}
			info, err := s.Info(context.Background())
			if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
				return false
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					return false
				}
			}
		}
		return true
	})
}

// TestFailoverUnderCheck kills with SIGKILL, under the checker's workload and
// a timed probe on both APIs of a three-node R3 cluster of nats-server
// processes, first the ORDER_COMMANDS leader (brought back after 12 s), then
// the node that carries an API's feed of keyed events, the one that answers
// its waiting requests (down for 25 s). The checker finds no violation; no
// probe request fails while NATS elects a new ORDER_COMMANDS leader within
// its budget (--nats-timeout, 10 s: elections take 4 to 9 s), and one that
// NATS leaves without a leader for longer is answered 503 outcome_unknown or
// service_unavailable (seen once in a run of the race suite, before the
// elections were logged: all three leaders on the killed node, the probe's
// three requests sent 8-16 ms after the kill, 503 outcome_unknown); how
// long each election took is logged; and the requests
// slowed by each failover end within 20 s of the
// kill (or, when raft needed another round of its election, within 11 s of
// the new leader, slowedBound): a killed leader's followers wait 4 to 9 s before they elect a new one
// (nats-server's raft election timeout), a request sent into the change is
// sent again within 3 s (the attempt cap), and a lost feed is noticed
// after two missed heartbeats (2 s): 9 + 3 + 2 = 14 s on a machine with CPU
// to spare. Measured on the 2-core machine: 1.0 to 12.8 s alone, up to 15.9 s
// while the other packages' tests ran beside it (elections and reconnects
// wait for CPU); the bound leaves room for that, and the figures are logged.
func TestFailoverUnderCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("kills cluster nodes for a minute; run without -short")
	}
	// Not parallel: it measures failover, not the CPU the other tests take.
	cluster := orderlytest.StartProcessCluster(t, orderlytest.ClusterPorts(t, 3))
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	var budget time.Duration // --nats-timeout, the default
	start := func() *orderlytest.Instance {
		cfg := orderlytest.Config(t)
		orderlytest.Attach(&cfg, cluster.URLs(), cluster.Creds, natsauth.Serve)
		budget = cfg.App.RequestTimeout
		return orderlytest.Start(t, cfg)
	}
	a, b := start(), start()
	js := a.JetStream(t)

	checked := runCheck(t, check.Config{URLs: []string{a.URL}, NATSURL: cluster.URLs(), NATSCredentials: a.Operator(), Clients: 4,
		Duration: 45 * time.Second, Settle: 60 * time.Second, RequestTimeout: 30 * time.Second})
	p := startProbe(t, a.URL, b.URL)

	time.Sleep(5 * time.Second)
	leaderName := leaderOf(t, js, events.CommandStream)
	leader := cluster.Index(leaderName)
	kill1 := time.Now()
	cluster.Kill(leader)
	elected1 := elected(t, js, leaderName, events.CommandStream)
	time.Sleep(12 * time.Second)
	cluster.Restart(leader)
	caughtUp(t, js)
	time.Sleep(3 * time.Second)
	// The feed that answers a waiting request in a keyed deployment (every
	// deployment this version creates) is the keyed events' feed on
	// ORDER_EVENTS, not the bucket's watch.
	feedName := orderlytest.FeedNode(t, js, events.EventStream, orderlytest.KeyedFeed)
	feed := cluster.Index(feedName)
	for _, name := range []string{events.CommandStream, events.EventStream, events.DeadLetterStream, jsstore.ResultsStream} {
		if l := leaderOf(t, js, name); l == feedName {
			t.Logf("kill 2 takes the leader of %s too", name)
		}
	}
	kill2 := time.Now()
	cluster.Kill(feed)
	elected2 := elected(t, js, feedName, events.CommandStream, events.EventStream, jsstore.ResultsStream)
	// The node stays down longer than the bound on slowed requests: a feed
	// that has not come back within it leaves every waiting request to
	// answer 202 after its wait (2 s), slow, past the bound. (With 15 s, a
	// feed that never came back was within it: 15 s + the wait.)
	time.Sleep(feedDown)
	hits := p.end()
	leaders := []map[string]time.Duration{elected1("kill 1"), elected2("kill 2")}

	rep := checked()
	for i, k := range []struct {
		what string
		at   time.Time
		to   time.Time
	}{{"ORDER_COMMANDS leader", kill1, kill1.Add(12 * time.Second)}, {"keyed-event feed's node", kill2, kill2.Add(feedDown)}} {
		errs, slowFor, n := window(hits, k.at, k.to)
		t.Logf("kill %d (%s): %d probe requests, %d errors, slowed for %s after the kill", i+1, k.what, n, len(errs), slowFor.Round(100*time.Millisecond))
		for _, e := range errs {
			sent := e.at.Sub(k.at)
			if excused(e, sent, leaders[i][events.CommandStream], budget) {
				// NATS elected later than the request's budget allows: the
				// answer says so, and the checker's retries with the same
				// key find the order made once or not at all.
				t.Logf("kill %d: a request sent %s after the kill had no ORDER_COMMANDS leader within its budget of %s: %d %s", i+1, sent.Round(time.Millisecond), budget, e.status, strings.TrimSpace(e.code))
				continue
			}
			t.Errorf("kill %d: a client saw an error, sent %s after the kill to %s, after %s: %d %s", i+1, sent.Round(time.Millisecond), e.url, e.took.Round(time.Millisecond), e.status, strings.TrimSpace(e.code))
		}
		if bound := slowedBound(slowest(leaders[i])); slowFor > bound {
			t.Errorf("kill %d (%s): requests slowed for %s, more than %s", i+1, k.what, slowFor, bound)
			for _, h := range hits {
				if !h.at.Before(k.at) && h.at.Before(k.to) && h.took > time.Second {
					t.Logf("  slow: %s at +%s took %s: %d", h.url, h.at.Sub(k.at).Round(time.Millisecond), h.took.Round(time.Millisecond), h.status)
				}
			}
		}
		// Each probe worker sent at least two requests in the window: one
		// that may have waited out the failover and one after it. (How many
		// more depends on how long the slow ones took, which the bound above
		// checks.)
		if n < 2*probeWorkers {
			t.Errorf("kill %d: only %d probe requests in the window", i+1, n)
		}
	}
	t.Logf("checker: %d orders, %d requests, outcomes %v", rep.Orders, rep.Requests, rep.Outcomes)

	// The node comes back before the processes stop, as after the first kill:
	// their shutdown is not what this test measures, and with a node down and
	// the other packages' tests beside it, one took longer than the helper's
	// 30 s budget in CI (its pipelines waiting for attempts that wait out
	// their NATS operations).
	cluster.Restart(feed)
	caughtUp(t, js)
}

// TestFailoverAllowances: what the failover and partition tests excuse is
// bound to the elections they measured, and no more.
func TestFailoverAllowances(t *testing.T) {
	t.Parallel()
	s := time.Second
	for _, c := range []struct {
		elected, want time.Duration
	}{{-1, 20 * s}, {4 * s, 20 * s}, {9 * s, 20 * s}, {12 * s, 23 * s}, {30 * s, 24 * s}} {
		if got := slowedBound(c.elected); got != c.want {
			t.Errorf("slowedBound(%s) = %s, want %s", c.elected, got, c.want)
		}
	}
	if got := slowest(map[string]time.Duration{"a": 3 * s, "b": 8 * s, "c": 0}); got != 8*s {
		t.Errorf("slowest = %s, want 8s", got)
	}
	if got := slowest(map[string]time.Duration{"a": 3 * s, "b": -1}); got != -1 {
		t.Errorf("slowest with no leader = %s, want -1", got)
	}
	budget := 10 * s
	unknown := hit{status: http.StatusServiceUnavailable, code: `{"code":"outcome_unknown"}`}
	for _, c := range []struct {
		e              hit
		sent, commands time.Duration
		want           bool
	}{
		{unknown, 0, 12 * s, true},      // the election came after the budget's last try
		{unknown, 0, 8 * s, false},      // within the budget: it should have been stored
		{unknown, 3 * s, 11 * s, false}, // sent later, the election was within its budget
		{unknown, 0, -1, true},          // no leader within a minute
		{hit{status: http.StatusInternalServerError, code: "boom"}, 0, 12 * s, false},
		{hit{status: 0, code: "transport: EOF"}, 0, 12 * s, false},
	} {
		if got := excused(c.e, c.sent, c.commands, budget); got != c.want {
			t.Errorf("excused(%d %s, sent %s, elected %s) = %v, want %v", c.e.status, c.e.code, c.sent, c.commands, got, c.want)
		}
	}
}
