package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// Network faults between each role and NATS, through an in-process toxiproxy.

// answer is what a client got.
type answer struct {
	status   int
	code     string
	location string
	took     time.Duration
}

// clients send new orders (one key each, retried only at the end) until
// stop, and record every answer.
type clients struct {
	mu      sync.Mutex
	answers map[string][]answer
	stop    chan struct{}
	wg      sync.WaitGroup
}

// pace is the pause of each client between two requests.
func startClients(t *testing.T, url, prefix string, n int, pace time.Duration, header ...string) *clients {
	c := &clients{answers: map[string][]answer{}, stop: make(chan struct{})}
	for w := 0; w < n; w++ {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-c.stop:
					return
				default:
				}
				key := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				begin := time.Now()
				r, err := orderlytest.TryDo(http.MethodPost, url+"/v1/orders", orderlytest.Order("c-"+key),
					append([]string{"Content-Type: application/json", "Idempotency-Key: " + key}, header...)...)
				if err != nil {
					continue
				}
				a := answer{status: r.Status, location: r.Header.Get("Location"), took: time.Since(begin)}
				if r.Header.Get("Content-Type") == "application/problem+json" {
					var p struct{ Code string }
					_ = json.Unmarshal(r.Body, &p)
					a.code = p.Code
				}
				c.mu.Lock()
				c.answers[key] = append(c.answers[key], a)
				c.mu.Unlock()
				time.Sleep(pace)
			}
		}()
	}
	return c
}

func (c *clients) end() map[string][]answer {
	close(c.stop)
	c.wg.Wait()
	return c.answers
}

// settled waits until the processor, and the optional projector when its
// consumer exists, have nothing pending.
func settled(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	orderlytest.Eventually(t, 60*time.Second, "processing to settle", func() bool {
		for stream, name := range map[string]string{events.CommandStream: jsstore.ProcessorConsumer, events.EventStream: jsstore.ProjectorConsumer} {
			c, err := js.Consumer(context.Background(), stream, name)
			if name == jsstore.ProjectorConsumer && errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				return false
			}
			info, err := c.Info(context.Background())
			if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
				return false
			}
			// The pending count alone lags a message just stored (the
			// stream tells its consumers after the PubAck): the ack floor
			// must have reached the stream's last message too.
			s, err := js.Stream(context.Background(), stream)
			if err != nil || info.AckFloor.Stream < s.CachedInfo().State.LastSeq {
				return false
			}
		}
		return true
	})
}

// checkAnswers verifies the promises of the answers against the orders
// stored, then retries every key: a key answered "nothing was stored" has no
// order; every answer that named an order named the same one; after the
// retries every key has exactly one order, the one it was answered with.
func checkAnswers(t *testing.T, answers map[string][]answer, inst *orderlytest.Instance, js jetstream.JetStream) {
	t.Helper()
	settled(t, js)
	before := orderlytest.CreatedByKey(t, js)
	var unknown, nothing int
	for key, as := range answers {
		onlyNothing := true
		for _, a := range as {
			switch {
			case a.code == "outcome_unknown":
				unknown++
				onlyNothing = false
			case a.code == "service_unavailable":
				nothing++
			default:
				onlyNothing = false
			}
		}
		if onlyNothing && before[idempotency.KeyHash(api.DefaultTenant, key)] != 0 {
			t.Errorf("%s was answered 'nothing was stored', yet it has an order: %+v", key, as)
		}
	}
	keys := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range keys {
				as := answers[key]
				loc := ""
				for _, a := range as {
					if a.location != "" && loc == "" {
						loc = a.location
					} else if a.location != "" && a.location != loc {
						t.Errorf("%s was answered with two orders: %+v", key, as)
					}
				}
				r, err := orderlytest.TryDo(http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-"+key),
					"Content-Type: application/json", "Idempotency-Key: "+key, "Prefer: wait=20")
				if err != nil || r.Status != http.StatusCreated || (loc != "" && r.Header.Get("Location") != loc) {
					t.Errorf("%s, answered %+v before, now: %d %s %s %v", key, as, r.Status, r.Header.Get("Location"), r.Body, err)
				}
			}
		}()
	}
	for key := range answers {
		keys <- key
	}
	close(keys)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	after := orderlytest.CreatedByKey(t, js)
	for key := range answers {
		if n := after[idempotency.KeyHash(api.DefaultTenant, key)]; n != 1 {
			t.Fatalf("%s: %d orders", key, n)
		}
	}
	t.Logf("%d keys; %d answers outcome_unknown, %d service_unavailable", len(answers), unknown, nothing)
}

// TestSlowAcksNeverSayNothingWasStored: an API whose acknowledgements from
// NATS are delayed by 2.5 s for 4 s answers no client "nothing was stored"
// for an order that was stored: it publishes again and learns the truth from
// the duplicate ack, or says the outcome is unknown. (48 clients without a
// pause and answered at once, so that many publishes are in flight when the
// delay starts.)
func TestSlowAcksNeverSayNothingWasStored(t *testing.T) {
	t.Parallel()
	core := orderlytest.Start(t, orderlytest.Config(t))
	proxy := orderlytest.NewProxy(t, core.NATSURL())
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true}
	orderlytest.Attach(&cfg, proxy.URL(), core.Creds, natsauth.API)
	edge := orderlytest.Start(t, cfg)

	load := startClients(t, edge.URL, "slow-acks", 48, 0, "Prefer: respond-async")
	time.Sleep(time.Second)
	proxy.Add(t, "slow-acks", "latency", "downstream", map[string]any{"latency": 2500})
	time.Sleep(4 * time.Second)
	proxy.Remove(t, "slow-acks")
	time.Sleep(time.Second)
	answers := load.end()
	slow := 0
	for _, as := range answers {
		for _, a := range as {
			if a.took > 2*time.Second {
				slow++
			}
		}
	}
	if slow == 0 {
		t.Fatal("no request took longer than 2s: the acks were not delayed")
	}
	checkAnswers(t, answers, edge, core.JetStream(t))
}

// TestProcessorNetworkFaultsAreNotPoison: NATS answers the processor 1.5 s
// late (its calls time out after 1 s) for 5 s, then the connection drops
// everything for 2 s, then is reset. No command is dead-lettered (the faults
// are NATS's, not the commands'), though each may be delivered only three
// times; every accepted order is decided once.
func TestProcessorNetworkFaultsAreNotPoison(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Projector: true}
	core := orderlytest.Start(t, cfg)
	proxy := orderlytest.NewProxy(t, core.NATSURL())
	pcfg := orderlytest.Config(t)
	pcfg.Roles = server.Roles{Processor: true}
	orderlytest.Attach(&pcfg, proxy.URL(), core.Creds, natsauth.Processor)
	pcfg.Processor.MaxAttempts = 3
	pcfg.Processor.Timeout = time.Second
	pcfg.Topology.AckWait = 3 * time.Second
	orderlytest.Start(t, pcfg)

	load := startClients(t, core.URL, "proc-net", 8, 10*time.Millisecond, "Prefer: respond-async")
	time.Sleep(time.Second)
	proxy.Add(t, "slow", "latency", "downstream", map[string]any{"latency": 1500})
	time.Sleep(5 * time.Second)
	proxy.Remove(t, "slow")
	proxy.Add(t, "blackhole", "timeout", "upstream", map[string]any{"timeout": 0})
	time.Sleep(2 * time.Second)
	proxy.Remove(t, "blackhole")
	time.Sleep(time.Second)
	proxy.Add(t, "reset", "reset_peer", "upstream", map[string]any{"timeout": 0})
	time.Sleep(time.Second)
	proxy.Remove(t, "reset")
	time.Sleep(time.Second)
	answers := load.end()
	js := core.JetStream(t)
	checkAnswers(t, answers, core, js)
	dlq, err := js.Stream(context.Background(), events.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dlq.Info(context.Background()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("%d commands dead-lettered for faults of the network (%v)", info.State.Msgs, err)
	}
}

// TestProjectorNetworkFaults: the optional projector's acks and deliveries
// are delayed, then its connection drops everything: every result is stored
// in the end, and retries replay them.
func TestProjectorNetworkFaults(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Processor: true}
	cfg.Topology.Projector = true // the optional projector's consumer, for the one started below
	cfg.API.Wait = 200 * time.Millisecond
	core := orderlytest.Start(t, cfg)
	proxy := orderlytest.NewProxy(t, core.NATSURL())
	pcfg := orderlytest.Config(t)
	pcfg.Roles = server.Roles{Projector: true}
	orderlytest.Attach(&pcfg, proxy.URL(), core.Creds, natsauth.Projector)
	pcfg.Topology.AckWait = 2 * time.Second
	orderlytest.Start(t, pcfg)

	load := startClients(t, core.URL, "proj-net", 8, 10*time.Millisecond)
	time.Sleep(time.Second)
	proxy.Add(t, "slow", "latency", "downstream", map[string]any{"latency": 1500})
	time.Sleep(3 * time.Second)
	proxy.Remove(t, "slow")
	proxy.Add(t, "blackhole", "timeout", "upstream", map[string]any{"timeout": 0})
	time.Sleep(2 * time.Second)
	proxy.Remove(t, "blackhole")
	time.Sleep(time.Second)
	checkAnswers(t, load.end(), core, core.JetStream(t))
}
