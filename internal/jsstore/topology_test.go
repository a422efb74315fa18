package jsstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// counting counts the calls that change streams and consumers.
type counting struct {
	jetstream.JetStream
	changes atomic.Int32
}

func (c *counting) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	c.changes.Add(1)
	return c.JetStream.CreateStream(ctx, cfg)
}

func (c *counting) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	c.changes.Add(1)
	return c.JetStream.UpdateStream(ctx, cfg)
}

func (c *counting) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c.changes.Add(1)
	return c.JetStream.CreateConsumer(ctx, stream, cfg)
}

func (c *counting) UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c.changes.Add(1)
	return c.JetStream.UpdateConsumer(ctx, stream, cfg)
}

// bare starts an embedded server without orderly's topology.
func bare(t *testing.T) jetstream.JetStream {
	t.Helper()
	return jsstore.StartBare(t, natsserver.Fsync{Interval: time.Second})
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}

// TestEnsureCreatesOnceThenChangesNothing: the first run creates everything,
// the next makes no call that changes anything, and the bucket binds as a KV.
func TestEnsureCreatesOnceThenChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := &counting{JetStream: bare(t)}
	topo := jsstore.DefaultTopology()
	if err := topo.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	if n := js.changes.Load(); n != 5 {
		t.Fatalf("%d creates, want 4 streams and the processor's consumer", n)
	}
	if _, err := js.Consumer(ctx, events.EventStream, jsstore.ProjectorConsumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the optional projector's consumer: %v, want it not created", err)
	}
	// The projector asked for: its consumer is added, and nothing else changes.
	js.changes.Store(0)
	topo.Projector = true
	if err := topo.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	if n := js.changes.Load(); n != 1 {
		t.Fatalf("%d creates, want the projector's consumer", n)
	}
	js.changes.Store(0)
	for i := 0; i < 3; i++ {
		if err := topo.Ensure(ctx, js, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := js.changes.Load(); n != 0 {
		t.Fatalf("%d changes to a topology that was right", n)
	}
	if _, err := jsstore.OpenResults(ctx, js, js); err != nil {
		t.Fatalf("the bucket does not bind: %v", err)
	}
	cfg := streamConfig(t, js, jsstore.ResultsStream)
	if cfg.MaxAge != topo.ResultTTL || !cfg.AllowDirect || !cfg.AllowAtomicPublish || cfg.MaxMsgsPerSubject != 1 {
		t.Fatalf("bucket stream: %+v", cfg)
	}
	// Events are kept for 7 days by default, not for ever: every retained
	// order costs disk and an entry of the server's subject index.
	if age := streamConfig(t, js, events.EventStream).MaxAge; age != 7*24*time.Hour {
		t.Fatalf("ORDER_EVENTS keeps events for %s by default, want 168h", age)
	}
}

// TestEnsureLeavesTunablesAndForeignFieldsAlone: a process with other windows
// changes nothing unless --update-topology; fields orderly does not own (a
// size limit an operator set) survive an update.
func TestEnsureLeavesTunablesAndForeignFieldsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := &counting{JetStream: bare(t)}
	if err := jsstore.DefaultTopology().Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js, events.EventStream)
	// An operator's limit. nats-server reserves it against the store's
	// maximum, which it sizes at 75% of the free disk at start
	// (diskAvailable): a run with 1.4 GB free failed with 1 GiB here
	// ("insufficient storage resources available").
	const limit = 64 << 20
	cfg.MaxBytes = limit
	if _, err := js.JetStream.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	other := jsstore.DefaultTopology()
	other.DedupWindow = 5 * time.Minute
	other.ResultTTL = 48 * time.Hour
	js.changes.Store(0)
	if err := other.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	if n := js.changes.Load(); n != 0 || streamConfig(t, js, events.CommandStream).Duplicates != 2*time.Minute {
		t.Fatalf("%d changes without --update-topology", n)
	}
	other.Update = true
	if err := other.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	if d := streamConfig(t, js, events.CommandStream).Duplicates; d != 5*time.Minute {
		t.Fatalf("window %s after --update-topology", d)
	}
	if ttl := streamConfig(t, js, jsstore.ResultsStream).MaxAge; ttl != 48*time.Hour {
		t.Fatalf("TTL %s after --update-topology", ttl)
	}
	if mb := streamConfig(t, js, events.EventStream).MaxBytes; mb != limit {
		t.Fatalf("the operator's limit was lost: %d", mb)
	}
}

// TestEnsureSetsWhatOrderlyNeeds: a consumer left by an older orderly that
// bounds deliveries is fixed without any flag: the pipeline needs -1.
func TestEnsureSetsWhatOrderlyNeeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := bare(t)
	topo := jsstore.DefaultTopology()
	if err := topo.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	old := topo.ProcessorConsumerConfig()
	old.MaxDeliver = 10
	if _, err := js.UpdateConsumer(ctx, events.CommandStream, old); err != nil {
		t.Fatal(err)
	}
	if err := topo.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
	if err != nil || c.CachedInfo().Config.MaxDeliver != -1 {
		t.Fatalf("max deliver after Ensure: %+v %v", c.CachedInfo().Config.MaxDeliver, err)
	}
}

// TestEnsureNeverChangesReplicasSilently on a three-node cluster: a process
// without --replicas leaves R3 as it is; one with another count is refused;
// --update-topology changes it.
func TestEnsureNeverChangesReplicasSilently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := orderlytest.Cluster(t, 3)
	js := cluster.Operator("test")
	r3 := jsstore.DefaultTopology()
	r3.Replicas = 3
	// Three processes at once against the fresh cluster: all succeed.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(30 * time.Second)
			for {
				errs[i] = r3.Ensure(ctx, js, nil)
				if errs[i] == nil || !jsstore.IsUnavailable(errs[i]) || time.Now().After(deadline) {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	unset := jsstore.DefaultTopology() // a role started without --replicas
	if err := unset.Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{events.CommandStream, events.EventStream, events.DeadLetterStream, jsstore.ResultsStream} {
		if cfg := streamConfig(t, js, name); cfg.Replicas != 3 || cfg.AllowDirect {
			t.Fatalf("%s after a role without --replicas: R%d, direct %v", name, cfg.Replicas, cfg.AllowDirect)
		}
	}
	c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
	if err != nil || c.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("consumer replicas %d %v", c.CachedInfo().Config.Replicas, err)
	}
	r1 := jsstore.DefaultTopology()
	r1.Replicas = 1
	if err := r1.Ensure(ctx, js, nil); !errors.Is(err, jsstore.ErrReplicas) {
		t.Fatalf("--replicas 1 against R3: %v, want ErrReplicas", err)
	}
	if cfg := streamConfig(t, js, events.CommandStream); cfg.Replicas != 3 {
		t.Fatalf("refused, yet R%d", cfg.Replicas)
	}
}

// TestStoredOrderIDs: a topology this version creates stores keyed order
// IDs; one created before (no form stored) reads as nonce and keeps it when
// Ensure runs again; the operator's --order-ids stores either form, and
// the stream's other metadata survives; a form that is neither is refused.
func TestStoredOrderIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := bare(t)
	if err := jsstore.DefaultTopology().Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	form := func() string {
		t.Helper()
		f, err := jsstore.StoredOrderIDs(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if got := form(); got != jsstore.OrderIDsKeyed {
		t.Fatalf("a new topology stores %q", got)
	}
	// A stream of an earlier version: no form stored.
	cfg := streamConfig(t, js, events.CommandStream)
	cfg.Metadata = map[string]string{"team": "orders"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := jsstore.DefaultTopology().Ensure(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	if got := form(); got != jsstore.OrderIDsNonce {
		t.Fatalf("a stream without a stored form reads %q after Ensure, want nonce", got)
	}
	for _, want := range []string{jsstore.OrderIDsKeyed, jsstore.OrderIDsNonce, jsstore.OrderIDsKeyed} {
		topo := jsstore.DefaultTopology()
		topo.OrderIDs = want
		if err := topo.Ensure(ctx, js, nil); err != nil {
			t.Fatal(err)
		}
		if got := form(); got != want {
			t.Fatalf("stored %q, reads %q", want, got)
		}
	}
	if md := streamConfig(t, js, events.CommandStream).Metadata; md["team"] != "orders" {
		t.Fatalf("the stream's other metadata: %v", md)
	}
	bad := jsstore.DefaultTopology()
	bad.OrderIDs = "v3"
	if err := bad.Ensure(ctx, js, nil); err == nil {
		t.Fatal("a form that is neither was accepted")
	}
}

// TestShortRetentionsAreCreated: every topology Validate accepts can be
// created: a retention shorter than a stream's duplicate window shortens
// the window (the server refuses a window longer than the retention).
func TestShortRetentionsAreCreated(t *testing.T) {
	t.Parallel()
	js := bare(t)
	topo := jsstore.DefaultTopology()
	topo.DedupWindow, topo.CommandRetention, topo.ResultTTL, topo.EventRetention = time.Second, 2*time.Second, 2*time.Second, 3*time.Second
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := topo.Ensure(context.Background(), js, nil); err != nil {
		t.Fatalf("a valid topology with short retentions: %v", err)
	}
	if got := streamConfig(t, js, events.EventStream); got.Duplicates != 3*time.Second || got.MaxAge != 3*time.Second {
		t.Errorf("ORDER_EVENTS: window %s, retention %s; want both 3s", got.Duplicates, got.MaxAge)
	}
	if got := jsstore.DefaultTopology().EventStreamConfig().Duplicates; got != 10*time.Second {
		t.Errorf("ORDER_EVENTS' window with the default retention: %s, want 10s", got)
	}
}

// TestNextPendingEndsWhenTheRestExpired: a reader of what was pending ends
// when the messages it has not received yet expire, instead of waiting for
// them for ever (the start-up load of the key views and projections
// rebuild read this way).
func TestNextPendingEndsWhenTheRestExpired(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := bare(t)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EXPIRING", Subjects: []string{"expiring.>"}, MaxAge: time.Second, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := js.Publish(ctx, fmt.Sprintf("expiring.%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.OrderedConsumer(ctx, "EXPIRING", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(10))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	got := 0
	for {
		_, ok, err := jsstore.NextPending(ctx, cons, it)
		if err != nil {
			t.Fatalf("after %d messages: %v", got, err)
		}
		if !ok {
			break
		}
		if got++; got == 1 { // the rest expire before they are delivered
			orderlytest.Eventually(t, 10*time.Second, "the messages to expire", func() bool {
				info, err := s.Info(ctx)
				return err == nil && info.State.Msgs == 0
			})
		}
	}
	if got == 0 || got >= 100 {
		t.Fatalf("received %d of 100, want those delivered before the rest expired", got)
	}
}

// TestProcessorConsumerMadeAgainStartsWhereTheEventsSay: the processors'
// consumer, removed and made again by Ensure, starts at the sequence the
// newest event says every command below was handled
// (events.HeaderDecidedBelow), rather than at the first of the retained
// commands; without such a header, or with one that ORDER_COMMANDS has not
// reached or that is no sequence, at the first.
func TestProcessorConsumerMadeAgainStartsWhereTheEventsSay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, header string // the newest event's header ("": none)
		from         uint64 // where the new consumer starts (0: the first command)
	}{
		{"said", "4", 4},
		{"after the last command", "6", 6},
		{"none", "", 0},
		{"beyond the commands", "7", 0},
		{"not a sequence", "4x", 0},
		{"the first", "1", 0},
		{"an older event says more", "-", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			js := orderlytest.JetStream(t, natsserver.Fsync{Interval: time.Second})
			for range 5 {
				if _, err := js.Publish(ctx, events.CommandSubject, []byte("{}")); err != nil {
					t.Fatal(err)
				}
			}
			event := func(header string) {
				msg := nats.NewMsg(events.EventSubject(events.KindCreated, events.OrderID(1, events.NewNonce())))
				msg.Data = []byte("{}")
				if header != "" {
					msg.Header.Set(events.HeaderDecidedBelow, header)
				}
				if _, err := js.PublishMsg(ctx, msg); err != nil {
					t.Fatal(err)
				}
			}
			if c.header == "-" {
				event("4") // only the newest event counts
				event("")
			} else {
				event(c.header)
			}
			if err := js.DeleteConsumer(ctx, events.CommandStream, jsstore.ProcessorConsumer); err != nil {
				t.Fatal(err)
			}
			if err := jsstore.DefaultTopology().Ensure(ctx, js, nil); err != nil {
				t.Fatal(err)
			}
			cons, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
			if err != nil {
				t.Fatal(err)
			}
			info := cons.CachedInfo()
			pending := uint64(5)
			if c.from > 0 {
				pending = 6 - c.from
				if info.Config.DeliverPolicy != jetstream.DeliverByStartSequencePolicy || info.Config.OptStartSeq != c.from {
					t.Errorf("made again as %s from %d, want from %d", info.Config.DeliverPolicy, info.Config.OptStartSeq, c.from)
				}
			} else if info.Config.DeliverPolicy != jetstream.DeliverAllPolicy {
				t.Errorf("made again as %s from %d, want every command", info.Config.DeliverPolicy, info.Config.OptStartSeq)
			}
			if info.NumPending != pending {
				t.Errorf("%d commands pending, want %d", info.NumPending, pending)
			}
			// Ensure again leaves it as it is: where it started is not a
			// setting of orderly's.
			if err := jsstore.DefaultTopology().Ensure(ctx, js, nil); err != nil {
				t.Fatalf("Ensure of the consumer made again: %v", err)
			}
		})
	}
}
