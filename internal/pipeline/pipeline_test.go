package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/pipeline"
)

// The tests run a pipeline on the processor's consumer of ORDER_COMMANDS of a
// real embedded server, with raw payloads (the handlers are the tests').

type env struct {
	t  *testing.T
	js jetstream.JetStream
	p  *pipeline.Pipeline
}

func config() pipeline.Config {
	return pipeline.Config{
		Name: "test", Stream: events.CommandStream, Consumer: jsstore.ProcessorConsumer,
		Concurrency: 4, MaxAttempts: 3, Timeout: time.Second, DeadLetterSubject: events.DeadLetterSubject,
		Backoff:      pipeline.Backoff{Base: 10 * time.Millisecond, Max: 40 * time.Millisecond},
		FaultBackoff: pipeline.Backoff{Base: 10 * time.Millisecond, Max: 40 * time.Millisecond},
		CloseTimeout: 5 * time.Second,
	}
}

func topology() jsstore.Topology {
	t := jsstore.DefaultTopology()
	t.AckWait = 3 * time.Second
	t.DedupWindow = time.Second
	return t
}

// start runs a pipeline with h on js; it is closed when the test ends.
func start(t *testing.T, js jetstream.JetStream, cfg pipeline.Config, h pipeline.Handler) *pipeline.Pipeline {
	t.Helper()
	return startWith(t, js, js, cfg, h)
}

// startWith is start with the pipeline's writes through pub.
func startWith(t *testing.T, js jetstream.JetStream, pub jsstore.Publisher, cfg pipeline.Config, h pipeline.Handler) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(cfg, js, pub, h, prometheus.NewRegistry(), orderlytest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(context.Background()) }()
	select {
	case <-p.Running():
	case err := <-errc:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("pipeline did not start")
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newEnv(t *testing.T, h pipeline.Handler) *env {
	t.Helper()
	js := orderlytest.JetStreamWith(t, natsserver.Fsync{Interval: time.Second}, topology())
	return &env{t: t, js: js, p: start(t, js, config(), h)}
}

// publish stores a message with the given Nats-Msg-Id and returns its sequence.
func publish(t *testing.T, js jetstream.JetStream, data, msgID string) uint64 {
	t.Helper()
	msg := &nats.Msg{Subject: events.CommandSubject, Data: []byte(data), Header: nats.Header{"Custom": []string{"kept"}}}
	if msgID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ack, err := js.PublishMsg(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatalf("%s was dropped as a duplicate", msgID)
	}
	return ack.Sequence
}

// settled waits until the consumer has acked every message of the stream
// (its pending count alone can lag a publish just made: it said 0 before
// the consumer saw the messages).
func settled(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	orderlytest.Eventually(t, 15*time.Second, "every message acked", func() bool {
		s, err := js.Stream(context.Background(), events.CommandStream)
		if err != nil {
			return false
		}
		c, err := js.Consumer(context.Background(), events.CommandStream, jsstore.ProcessorConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= s.CachedInfo().State.LastSeq
	})
}

// deadLetters returns the dead letters stored so far.
func deadLetters(t *testing.T, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(context.Background(), events.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

// calls records the deliveries a handler saw, per payload.
type calls struct {
	mu sync.Mutex
	m  map[string][]int // payload -> Delivered of each attempt
}

func (c *calls) add(d *pipeline.Delivery) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]int{}
	}
	c.m[string(d.Data)] = append(c.m[string(d.Data)], d.Delivered)
	return len(c.m[string(d.Data)])
}

func (c *calls) get(payload string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.m[payload]...)
}

func TestHandledMessagesAreAcked(t *testing.T) {
	t.Parallel()
	var c calls
	e := newEnv(t, pipeline.Handler{Handle: func(_ context.Context, d *pipeline.Delivery) error {
		c.add(d)
		return nil
	}})
	for i := 0; i < 20; i++ {
		publish(t, e.js, "m"+strconv.Itoa(i), "")
	}
	settled(t, e.js)
	for i := 0; i < 20; i++ {
		if got := c.get("m" + strconv.Itoa(i)); len(got) != 1 || got[0] != 1 {
			t.Fatalf("m%d: deliveries %v, want one", i, got)
		}
	}
	if n := len(deadLetters(t, e.js)); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// TestFailuresAreRetriedWithBackoff: a handler error naks the message with a
// delay; the next delivery succeeds and nothing is dead-lettered.
func TestFailuresAreRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	var c calls
	var times []time.Time
	var mu sync.Mutex
	e := newEnv(t, pipeline.Handler{Handle: func(_ context.Context, d *pipeline.Delivery) error {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		if c.add(d) < 3 {
			return errors.New("flaky")
		}
		return nil
	}})
	publish(t, e.js, "flaky", "")
	settled(t, e.js)
	if got := c.get("flaky"); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("deliveries %v, want [1 2 3]", got)
	}
	if gap := times[1].Sub(times[0]); gap < 10*time.Millisecond {
		t.Fatalf("redelivered after %s, before the backoff", gap)
	}
	if n := len(deadLetters(t, e.js)); n != 0 {
		t.Fatalf("%d dead letters for a message that succeeded", n)
	}
}

// TestPanicsAreDeadLettered is the regression test of a handler that panics on
// every delivery: the panic is an error like any other, so on the last
// delivery the message is given up and dead-lettered, not retried for ever.
func TestPanicsAreDeadLettered(t *testing.T) {
	t.Parallel()
	var c calls
	var gaveUp atomic.Int32
	var cause atomic.Value
	e := newEnv(t, pipeline.Handler{
		Handle: func(_ context.Context, d *pipeline.Delivery) error {
			c.add(d)
			panic("handler bug")
		},
		GiveUp: func(_ context.Context, _ *pipeline.Delivery, err error) error {
			gaveUp.Add(1)
			cause.Store(err.Error())
			return nil
		},
	})
	publish(t, e.js, "panics", "key-1")
	settled(t, e.js)
	if got := c.get("panics"); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("deliveries %v, want 3 (MaxAttempts)", got)
	}
	if gaveUp.Load() != 1 || !strings.Contains(cause.Load().(string), "handler bug") {
		t.Fatalf("give-up called %d times, cause %v", gaveUp.Load(), cause.Load())
	}
	dl := deadLetters(t, e.js)
	if len(dl) != 1 || string(dl[0].Data) != "panics" || !strings.Contains(dl[0].Header.Get(pipeline.HeaderReason), "handler bug") {
		t.Fatalf("dead letters: %d %v", len(dl), dl)
	}
}

// TestEveryDeadLetterReachesTheDLQ is the regression test of two poisoned
// messages with one Nats-Msg-Id (one idempotency key, the second sent after
// the command window): both are dead-lettered, because a dead letter carries
// its own ID, not the original's; the Nats-* headers are not copied, the
// others are, with the original's place.
func TestEveryDeadLetterReachesTheDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pipeline.Handler{Handle: func(context.Context, *pipeline.Delivery) error {
		return errors.New("poison")
	}})
	first := publish(t, e.js, "poison-1", "same-key")
	time.Sleep(1500 * time.Millisecond) // past the command stream's window (1s)
	second := publish(t, e.js, "poison-2", "same-key")
	settled(t, e.js)
	dl := deadLetters(t, e.js)
	if len(dl) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dl))
	}
	for i, seq := range []uint64{first, second} {
		h := dl[i].Header
		if h.Get(pipeline.HeaderSeq) != strconv.FormatUint(seq, 10) || h.Get(pipeline.HeaderStream) != events.CommandStream ||
			h.Get(pipeline.HeaderSubject) != events.CommandSubject || h.Get("Custom") != "kept" || h.Get(pipeline.HeaderDelivered) != "3" {
			t.Fatalf("dead letter %d headers: %v", i, h)
		}
		if id := h.Get(jetstream.MsgIDHeader); id != events.CommandStream+"."+strconv.FormatUint(seq, 10) {
			t.Fatalf("dead letter %d has Nats-Msg-Id %q", i, id)
		}
	}
}

// TestPermanentErrorsAreGivenUpAtOnce: an error marked permanent is not retried.
func TestPermanentErrorsAreGivenUpAtOnce(t *testing.T) {
	t.Parallel()
	var c calls
	e := newEnv(t, pipeline.Handler{Handle: func(_ context.Context, d *pipeline.Delivery) error {
		c.add(d)
		return permanent{errors.New("malformed")}
	}})
	publish(t, e.js, "malformed", "")
	settled(t, e.js)
	if got := c.get("malformed"); len(got) != 1 {
		t.Fatalf("deliveries %v, want one", got)
	}
	if n := len(deadLetters(t, e.js)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}

type permanent struct{ error }

func (permanent) Permanent() bool { return true }

// errUnavailable is what an unavailable NATS looks like to a handler.
var errUnavailable = fmt.Errorf("store event: %w", nats.ErrTimeout)

// TestInfrastructureFaultsDoNotUseTheBudget: while the handler's store is
// unavailable the message is held (not redelivered, not dead-lettered, however
// long it lasts), consumption pauses, and it is handled once the store is back.
func TestInfrastructureFaultsDoNotUseTheBudget(t *testing.T) {
	t.Parallel()
	var c calls
	var down atomic.Bool
	down.Store(true)
	var gaveUp atomic.Int32
	e := newEnv(t, pipeline.Handler{
		Handle: func(_ context.Context, d *pipeline.Delivery) error {
			c.add(d)
			if down.Load() {
				return errUnavailable
			}
			return nil
		},
		GiveUp: func(context.Context, *pipeline.Delivery, error) error { gaveUp.Add(1); return nil },
	})
	publish(t, e.js, "held", "")
	orderlytest.Eventually(t, 10*time.Second, "10 attempts during the fault", func() bool { return len(c.get("held")) >= 10 })
	if e.p.Held() != 1 {
		t.Fatalf("%d messages held, want 1", e.p.Held())
	}
	publish(t, e.js, "later", "")
	time.Sleep(300 * time.Millisecond)
	if got := c.get("later"); len(got) != 0 {
		t.Fatalf("a new message was fetched during the fault: %v", got)
	}
	down.Store(false)
	settled(t, e.js)
	for _, d := range c.get("held") {
		if d != 1 {
			t.Fatalf("deliveries %v: the fault counted as redeliveries", c.get("held"))
		}
	}
	if gaveUp.Load() != 0 || len(deadLetters(t, e.js)) != 0 || e.p.Held() != 0 {
		t.Fatalf("given up %d times, %d dead letters, %d held", gaveUp.Load(), len(deadLetters(t, e.js)), e.p.Held())
	}
	if got := c.get("later"); len(got) != 1 {
		t.Fatalf("the later message: %v", got)
	}
}

// TestGiveUpIsRepeatedUntilStored: a poisoned message is acked only once the
// give-up and the dead letter are both stored; while the dead-letter stream is
// missing the message is held, and it is dead-lettered once it is back.
func TestGiveUpIsRepeatedUntilStored(t *testing.T) {
	t.Parallel()
	js := orderlytest.JetStreamWith(t, natsserver.Fsync{Interval: time.Second}, topology())
	ctx := context.Background()
	dlqConfig := topology().DeadLetterStreamConfig()
	if err := js.DeleteStream(ctx, events.DeadLetterStream); err != nil {
		t.Fatal(err)
	}
	var giveUps atomic.Int32
	start(t, js, config(), pipeline.Handler{
		Handle: func(context.Context, *pipeline.Delivery) error { return errors.New("poison") },
		GiveUp: func(context.Context, *pipeline.Delivery, error) error {
			if giveUps.Add(1) < 3 {
				return errUnavailable // the 422 could not be stored
			}
			return nil
		},
	})
	publish(t, js, "poison", "")
	orderlytest.Eventually(t, 10*time.Second, "the give-up tried while the dead-letter stream is gone", func() bool { return giveUps.Load() >= 5 })
	c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.NumAckPending != 1 {
		t.Fatalf("the message was settled without its dead letter: %+v %v", info, err)
	}
	if _, err := js.CreateStream(ctx, dlqConfig); err != nil {
		t.Fatal(err)
	}
	settled(t, js)
	if n := len(deadLetters(t, js)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}

// TestDeadLetterUnansweredIsSentAgain: a dead letter whose publish goes
// unanswered (the dead-letter stream gone, a subscriber that never answers
// on its subject: a stream leader that hangs, nats-facts 23) is sent again
// after a second, and stored once the stream is back (300 ms after the
// message). With the pipeline's timeout of 5 s, as orderly runs it: on the
// code before, the dead letter waited those 5 s before its next try.
func TestDeadLetterUnansweredIsSentAgain(t *testing.T) {
	t.Parallel()
	top := topology()
	top.AckWait = 10 * time.Second
	js := orderlytest.JetStreamWith(t, natsserver.Fsync{Interval: time.Second}, top)
	ctx := context.Background()
	if err := js.DeleteStream(ctx, events.DeadLetterStream); err != nil {
		t.Fatal(err)
	}
	silent, err := js.Conn().Subscribe(events.DeadLetterSubject, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe() //nolint:errcheck // the test's connection closes anyway
	cfg := config()
	cfg.Timeout = 5 * time.Second
	startWith(t, js, jsstore.FastPublish(js, 5*time.Second), cfg, pipeline.Handler{
		Handle: func(context.Context, *pipeline.Delivery) error { return permanent{errors.New("malformed")} },
	})
	at := time.Now()
	publish(t, js, "malformed", "")
	time.Sleep(300 * time.Millisecond)
	if _, err := js.CreateStream(ctx, top.DeadLetterStreamConfig()); err != nil {
		t.Fatal(err)
	}
	settled(t, js)
	took := time.Since(at)
	t.Logf("dead-lettered %s after the message", took.Round(time.Millisecond))
	if took > 2500*time.Millisecond {
		t.Errorf("dead-lettered %s after the message, want its second copy (sent after 1 s) stored", took.Round(time.Millisecond))
	}
	if n := len(deadLetters(t, js)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}

// TestCloseHandsHeldMessagesBack: Close ends the holds promptly; the message
// is redelivered to the next pipeline.
func TestCloseHandsHeldMessagesBack(t *testing.T) {
	t.Parallel()
	js := orderlytest.JetStreamWith(t, natsserver.Fsync{Interval: time.Second}, topology())
	var c calls
	p := start(t, js, config(), pipeline.Handler{Handle: func(_ context.Context, d *pipeline.Delivery) error {
		c.add(d)
		return errUnavailable
	}})
	publish(t, js, "held", "")
	orderlytest.Eventually(t, 10*time.Second, "the message held", func() bool { return p.Held() == 1 })
	begin := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(begin); el > 2*time.Second {
		t.Fatalf("Close took %s", el)
	}
	var again calls
	start(t, js, config(), pipeline.Handler{Handle: func(_ context.Context, d *pipeline.Delivery) error {
		again.add(d)
		return nil
	}})
	settled(t, js)
	if got := again.get("held"); len(got) != 1 || got[0] != 2 {
		t.Fatalf("after Close: deliveries %v, want the second", got)
	}
}

// TestRefusesAConsumerThatDropsMessages: a consumer that bounds deliveries
// would let the server move past a failing message; the pipeline refuses it.
func TestRefusesAConsumerThatDropsMessages(t *testing.T) {
	t.Parallel()
	js := orderlytest.JetStreamWith(t, natsserver.Fsync{Interval: time.Second}, topology())
	cc := topology().ProcessorConsumerConfig()
	cc.MaxDeliver = 10
	if _, err := js.UpdateConsumer(context.Background(), events.CommandStream, cc); err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(config(), js, js, pipeline.Handler{Handle: func(context.Context, *pipeline.Delivery) error { return nil }},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "bounds deliveries") {
		t.Fatalf("Run: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := pipeline.Config{Name: "x", Stream: "S", Consumer: "c", MaxAttempts: 3, Concurrency: -1}
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "dead-letter subject") || !strings.Contains(err.Error(), "concurrency") {
		t.Fatalf("Validate: %v", err)
	}
	if err := config().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := pipeline.Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 50: time.Second} {
		if got := b.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
}

// runBatches stores payloads, then runs a pipeline with handleBatch alone
// (no Handle) and Concurrency 16 (batches of up to 4) until every message is
// acked: stored first, the messages arrive together.
func runBatches(t *testing.T, js jetstream.JetStream, payloads []string, handleBatch func(context.Context, []*pipeline.Delivery) []error) {
	t.Helper()
	for _, p := range payloads {
		publish(t, js, p, "")
	}
	cfg := config()
	cfg.Concurrency = 16
	start(t, js, cfg, pipeline.Handler{HandleBatch: handleBatch})
	settled(t, js)
}

// batchRounds is how many times untilTogether tries a scenario.
const batchRounds = 5

// untilTogether runs round on a fresh server until it reports that the
// messages it needs in one batch were handled together, at most batchRounds
// times. A batch is what has arrived with its first message, never waiting
// for more, so on a loaded machine a fetch's messages can come one by one
// (CI saw it once). Each round asserts what holds however the batches
// formed; only the batch that the test is about is left to chance.
func untilTogether(t *testing.T, round func(js jetstream.JetStream) (together bool)) {
	t.Helper()
	for range batchRounds {
		js := orderlytest.JetStreamWith(t, natsserver.Fsync{Interval: time.Second}, topology())
		if round(js) || t.Failed() {
			return
		}
	}
	t.Fatalf("the messages were never handled together in %d rounds", batchRounds)
}

// TestBatchSettlesEachDelivery: a batch handler gets the messages that
// arrived together, and each delivery is settled by its own outcome: acked,
// given up at once (permanent), redelivered later (a failure), held and tried
// again in the same delivery (a fault) with the other held ones, or
// redelivered when the handler returned no outcome for it.
func TestBatchSettlesEachDelivery(t *testing.T) {
	t.Parallel()
	untilTogether(t, func(js jetstream.JetStream) bool { return batchSettlesEachDelivery(t, js) })
}

func batchSettlesEachDelivery(t *testing.T, js jetstream.JetStream) (together bool) {
	var c calls
	var mu sync.Mutex
	var attempts [][]string
	faults := map[string]int{}
	cut := map[string][]int{} // payload -> the deliveries given no outcome
	handleBatch := func(_ context.Context, ds []*pipeline.Delivery) []error {
		mu.Lock()
		defer mu.Unlock()
		var attempt []string
		for _, d := range ds {
			attempt = append(attempt, string(d.Data))
			c.add(d)
		}
		attempts = append(attempts, attempt)
		errs := make([]error, 0, len(ds))
		for i, d := range ds {
			p := string(d.Data)
			switch {
			case strings.HasPrefix(p, "perm"):
				errs = append(errs, permanent{errors.New("malformed")})
			case strings.HasPrefix(p, "fail") && d.Delivered == 1:
				errs = append(errs, errors.New("a bug"))
			case strings.HasPrefix(p, "fault") && faults[p] < 2:
				faults[p]++
				errs = append(errs, errUnavailable)
			case strings.HasPrefix(p, "short") && d.Delivered == 1:
				for _, d := range ds[i:] {
					cut[string(d.Data)] = append(cut[string(d.Data)], d.Delivered)
				}
				return errs // no outcome for it, nor for what follows it
			default:
				errs = append(errs, nil)
			}
		}
		return errs
	}
	runBatches(t, js, []string{"ok1", "perm1", "fail1", "fault1", "ok2", "fault2", "ok3", "short1"}, handleBatch)

	for _, p := range []string{"ok1", "ok2", "ok3"} {
		if got := c.get(p); len(got) != 1 || got[0] != 1 {
			t.Errorf("%s: deliveries %v, want one", p, got)
		}
	}
	if got := c.get("perm1"); len(got) != 1 {
		t.Errorf("perm1 handled %v, want once and given up", got)
	}
	mu.Lock()
	cutFail, cutShort := cut["fail1"], cut["short1"]
	mu.Unlock()
	// fail1's second delivery can follow short1's first in one attempt and
	// get no outcome either (CI saw it once): a third one then settles it.
	if got := c.get("fail1"); !settledInTheEnd(got, append([]int{1}, cutFail...)) {
		t.Errorf("fail1: deliveries %v (%v given no outcome), want a redelivery after the failure", got, cutFail)
	}
	for _, p := range []string{"fault1", "fault2"} {
		if got := c.get(p); len(got) != 3 || got[2] != 1 {
			t.Errorf("%s: deliveries %v, want three attempts of the first delivery", p, got)
		}
	}
	if got := c.get("short1"); !settledInTheEnd(got, cutShort) || len(got) != 2 {
		t.Errorf("short1: deliveries %v (%v given no outcome), want a redelivery after no outcome", got, cutShort)
	}
	if dl := deadLetters(t, js); len(dl) != 1 || string(dl[0].Data) != "perm1" {
		t.Errorf("dead letters %d, want perm1 only", len(dl))
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, a := range attempts {
		together = together || len(a) > 1
		for _, p := range a {
			// A held delivery is tried again with the other held ones only.
			if seen[p] && strings.HasPrefix(p, "fault") && slices.ContainsFunc(a, func(q string) bool { return !strings.HasPrefix(q, "fault") }) {
				t.Errorf("attempt %v: a held delivery tried again with others", a)
			}
			seen[p] = true
		}
	}
	if !together {
		t.Logf("attempts %v: the messages were never handled together", attempts)
	}
	return together
}

// settledInTheEnd: the deliveries got are 1, 2, ... n with n > 1, each but
// the last one unsettled (failed or given no outcome), the last one settled.
func settledInTheEnd(got, unsettled []int) bool {
	if len(got) < 2 {
		return false
	}
	for i, n := range got {
		if n != i+1 || slices.Contains(unsettled, n) != (i < len(got)-1) {
			return false
		}
	}
	return true
}

// TestBatchPanicCostsTheOthersNothing: when a batch's attempt panics, none
// of its deliveries is settled by it; each is tried alone at once, so the
// others are acked in their first delivery and only the poisoned one is
// redelivered and, in the end, dead-lettered.
func TestBatchPanicCostsTheOthersNothing(t *testing.T) {
	t.Parallel()
	untilTogether(t, func(js jetstream.JetStream) bool { return batchPanicCostsTheOthersNothing(t, js) })
}

func batchPanicCostsTheOthersNothing(t *testing.T, js jetstream.JetStream) (together bool) {
	var c calls
	var mu sync.Mutex
	withOthers := false
	handleBatch := func(_ context.Context, ds []*pipeline.Delivery) []error {
		poisoned := false
		for _, d := range ds {
			c.add(d)
			poisoned = poisoned || string(d.Data) == "panic"
		}
		if poisoned {
			mu.Lock()
			withOthers = withOthers || len(ds) > 1
			mu.Unlock()
			panic("injected")
		}
		return make([]error, len(ds))
	}
	payloads := []string{"ok1", "ok2", "panic", "ok3", "ok4", "ok5"}
	runBatches(t, js, payloads, handleBatch)
	mu.Lock()
	defer mu.Unlock()
	if !withOthers {
		t.Log("the poisoned message was never in a batch with others")
	}
	for _, p := range payloads {
		got := c.get(p)
		if p == "panic" {
			if len(got) == 0 || got[len(got)-1] != 3 {
				t.Errorf("panic: deliveries %v, want up to the third", got)
			}
			continue
		}
		for _, d := range got {
			if d != 1 {
				t.Errorf("%s: deliveries %v: redelivered for another's panic", p, got)
				break
			}
		}
	}
	if dl := deadLetters(t, js); len(dl) != 1 || string(dl[0].Data) != "panic" {
		t.Errorf("%d dead letters, want the poisoned one", len(dl))
	}
	return withOthers
}
