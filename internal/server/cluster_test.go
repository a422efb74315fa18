package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestClusterR3 runs two orderly processes against a three-node NATS cluster
// with replicated streams: one key makes one order across both processes,
// replays are identical whichever process answers, and losing a node loses
// nothing acknowledged.
func TestClusterR3(t *testing.T) {
	t.Parallel()
	cluster := orderlytest.Cluster(t, 3)
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	start := func() *orderlytest.Instance {
		cfg := orderlytest.Config(t)
		orderlytest.Attach(&cfg, cluster.URLs(), cluster.Creds, natsauth.Serve)
		return orderlytest.Start(t, cfg)
	}
	a, b := start(), start()
	js := a.JetStream(t)
	// Replicated streams answer reads from the leader only: a follower may be behind.
	for _, name := range []string{events.CommandStream, events.EventStream, "KV_" + events.ResultsBucket} {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := s.CachedInfo().Config; cfg.Replicas != 3 || cfg.AllowDirect {
			t.Fatalf("%s: replicas %d, direct reads %v", name, cfg.Replicas, cfg.AllowDirect)
		}
	}

	// Concurrent sends of one key through both processes.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bodies [][]byte
	for i := 0; i < 40; i++ {
		inst := a
		if i%2 == 1 {
			inst = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := orderlytest.TryDo(http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-1"),
				"Content-Type: application/json", "Idempotency-Key: cluster-key", "Prefer: wait=10")
			if err != nil {
				t.Error(err)
				return
			}
			if r.Status != http.StatusCreated {
				t.Errorf("%d %s", r.Status, r.Body)
				return
			}
			mu.Lock()
			bodies = append(bodies, r.Body)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, body := range bodies[1:] {
		if !bytes.Equal(body, bodies[0]) {
			t.Fatalf("answers differ: %s vs %s", body, bodies[0])
		}
	}
	if n := orderlytest.CreatedByKey(t, js)[idempotency.KeyHash(api.DefaultTenant, "cluster-key")]; n != 1 {
		t.Fatalf("%d orders for one key on the cluster", n)
	}

	// Orders before a node goes away, then the node goes away.
	accepted := map[string][]byte{}
	for i := 0; i < 10; i++ {
		key := "before-" + strconv.Itoa(i)
		r := a.PostOrder(t, key, orderlytest.Order("c-2"))
		if r.Status != http.StatusCreated {
			t.Fatalf("%s: %d %s", key, r.Status, r.Body)
		}
		accepted[key] = r.Body
	}
	cluster.Stop(0)
	for i := 0; i < 10; i++ {
		key := "after-" + strconv.Itoa(i)
		var r orderlytest.Response
		orderlytest.Eventually(t, 30*time.Second, key+" accepted with a node down", func() bool {
			r = b.PostOrder(t, key, orderlytest.Order("c-3"), "Prefer: wait=10")
			return r.Status == http.StatusCreated
		})
		accepted[key] = r.Body
	}
	for key, body := range accepted {
		var r orderlytest.Response
		orderlytest.Eventually(t, 30*time.Second, key+" replayed", func() bool {
			r = a.PostOrder(t, key, orderlytest.Order(map[bool]string{true: "c-2", false: "c-3"}[key[0] == 'b']))
			return r.Status == http.StatusCreated
		})
		if !bytes.Equal(r.Body, body) || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s after the node loss: %s, want a replay of %s", key, r.Body, body)
		}
	}
	// Every answered order gets its event, never two: the event follows the
	// stored response (ADR 0009), and one answered just before the node
	// stopped may be stored only once the processor's retry finds the new
	// stream leader.
	orderlytest.Eventually(t, 60*time.Second, "one OrderCreated per answered key", func() bool {
		counts := orderlytest.CreatedByKey(t, b.JetStream(t))
		all := true
		for key := range accepted {
			switch n := counts[idempotency.KeyHash(api.DefaultTenant, key)]; {
			case n > 1:
				t.Fatalf("%s: %d orders", key, n)
			case n == 0:
				all = false
			}
		}
		return all
	})
}

// TestAPIsStartedTogetherWithAFreshClusterAllServe: three API processes,
// a processor and a projector started at once with the setup against a fresh
// three-node cluster (as docker compose does), three times over: every one
// of them serves. Nothing a starting process does may break another (a bucket
// setting toggled on and off did).
func TestAPIsStartedTogetherWithAFreshClusterAllServe(t *testing.T) {
	t.Parallel()
	for round := 0; round < 3; round++ {
		cluster := orderlytest.Cluster(t, 3)
		users := []string{natsauth.API, natsauth.API, natsauth.API, natsauth.Processor, natsauth.Projector}
		roles := []server.Roles{{API: true}, {API: true}, {API: true}, {Processor: true}, {Projector: true}}
		insts := make([]*orderlytest.Instance, len(users))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3) }()
		for i := range users {
			cfg := orderlytest.Config(t)
			cfg.Roles = roles[i]
			orderlytest.Attach(&cfg, cluster.URLs(), cluster.Creds, users[i])
			wg.Add(1)
			go func() { defer wg.Done(); insts[i] = orderlytest.Start(t, cfg) }()
		}
		wg.Wait()
		for i, inst := range insts[:3] {
			if inst == nil {
				t.FailNow()
			}
			key := fmt.Sprintf("together-%d-%d", round, i)
			if r := inst.PostOrder(t, key, orderlytest.Order("c-1"), "Prefer: wait=10"); r.Status != http.StatusCreated {
				t.Fatalf("round %d, API %d: %d %s", round, i, r.Status, r.Body)
			}
		}
	}
}

// TestRoleStartedBeforeTheClusterWaits: a role started while no NATS answers
// waits (logging its progress) and serves once the cluster is up.
func TestRoleStartedBeforeTheClusterWaits(t *testing.T) {
	t.Parallel()
	ports := orderlytest.ClusterPorts(t, 3)
	creds := orderlytest.NewCredentials(t)
	cfg := orderlytest.Config(t)
	orderlytest.Attach(&cfg, ports.URLs(), creds, natsauth.Serve)
	started := make(chan *orderlytest.Instance, 1)
	go func() { started <- orderlytest.Start(t, cfg) }()
	time.Sleep(2 * time.Second)
	select {
	case <-started:
		t.Fatal("started without NATS")
	default:
	}
	orderlytest.StartClusterWith(t, ports, creds)
	orderlytest.Setup(t, ports.URLs(), creds, 3)
	var inst *orderlytest.Instance
	select {
	case inst = <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the role did not start once the cluster was up")
	}
	if r := inst.PostOrder(t, "late-cluster", orderlytest.Order("c-1"), "Prefer: wait=10"); r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
}

// TestRoleWithoutReplicasChangesNothing: roles started against R3 streams
// leave them, the bucket and the consumers at R3 (roles never change the
// topology; a setup without --replicas keeps what exists).
func TestRoleWithoutReplicasChangesNothing(t *testing.T) {
	t.Parallel()
	cluster := orderlytest.Cluster(t, 3)
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 3)
	first := orderlytest.Config(t)
	orderlytest.Attach(&first, cluster.URLs(), cluster.Creds, natsauth.Serve)
	a := orderlytest.Start(t, first)
	second := orderlytest.Config(t)
	second.Roles = server.Roles{Processor: true}
	orderlytest.Attach(&second, cluster.URLs(), cluster.Creds, natsauth.Processor)
	orderlytest.Start(t, second)
	orderlytest.Setup(t, cluster.URLs(), cluster.Creds, 0)
	js := a.JetStream(t)
	ctx := context.Background()
	for _, name := range []string{events.CommandStream, events.EventStream, events.DeadLetterStream, "KV_" + events.ResultsBucket} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := s.CachedInfo().Config; cfg.Replicas != 3 {
			t.Fatalf("%s: R%d after a role without --replicas", name, cfg.Replicas)
		}
	}
	for stream, name := range map[string]string{events.CommandStream: "processor", events.EventStream: "projector"} {
		c, err := js.Consumer(ctx, stream, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := c.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("consumer %s: R%d", name, r)
		}
	}
}
