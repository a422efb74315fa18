package jsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
)

// Durable consumer names.
const (
	// ProcessorConsumer is the durable pull consumer of ORDER_COMMANDS that every
	// processor instance shares.
	ProcessorConsumer = "processor"
	// ProjectorConsumer is the durable pull consumer of ORDER_EVENTS that every
	// projector instance shares.
	ProjectorConsumer = "projector"
)

// Topology is the set of streams, buckets and durable consumers orderly runs on.
type Topology struct {
	// Replicas of every stream and bucket: 1 standalone, 3 in a cluster.
	Replicas int
	// DedupWindow is the duplicate window of ORDER_COMMANDS: a retry whose
	// Nats-Msg-Id was stored less than this long ago is dropped by the broker.
	DedupWindow time.Duration
	// CommandRetention is how long commands stay stored. It bounds how long the
	// processor may be down without losing accepted commands, and must be at least
	// DedupWindow.
	CommandRetention time.Duration
	// ResultTTL is how long a stored result answers retries of its key; the TTL of
	// ORDER_RESULTS.
	ResultTTL time.Duration
	// EventRetention is how long events stay stored; 0 keeps them for ever.
	EventRetention time.Duration
	// DeadLetterRetention is how long dead-lettered commands stay stored; 0 keeps
	// them for ever.
	DeadLetterRetention time.Duration
	// AckWait is how long a consumer waits for an ack before it redelivers.
	// A pipeline's attempts must be shorter (internal/pipeline checks).
	AckWait time.Duration
}

// DefaultTopology is the topology of a standalone orderly.
func DefaultTopology() Topology {
	return Topology{
		Replicas:         1,
		DedupWindow:      2 * time.Minute,
		CommandRetention: 72 * time.Hour,
		ResultTTL:        24 * time.Hour,
		AckWait:          10 * time.Second,
	}
}

// Validate reports every problem with t.
func (t Topology) Validate() error {
	var errs []error
	if t.Replicas < 1 || t.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas must be 1 to 5, got %d", t.Replicas))
	}
	if t.DedupWindow < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("dedup window must be at least 100ms, got %s", t.DedupWindow))
	}
	if t.CommandRetention < t.DedupWindow {
		errs = append(errs, fmt.Errorf("command retention (%s) must be at least the dedup window (%s)", t.CommandRetention, t.DedupWindow))
	}
	if t.ResultTTL < t.DedupWindow {
		errs = append(errs, fmt.Errorf("result TTL (%s) must be at least the dedup window (%s): a retry inside the window must find its result", t.ResultTTL, t.DedupWindow))
	}
	if t.EventRetention < 0 || t.DeadLetterRetention < 0 {
		errs = append(errs, errors.New("retention must not be negative"))
	}
	if t.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack wait must be at least 1s, got %s", t.AckWait))
	}
	return errors.Join(errs...)
}

// CommandStreamConfig is the configuration of ORDER_COMMANDS.
func (t Topology) CommandStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.CommandStream,
		Description: "orderly CreateOrder commands; Nats-Msg-Id is the hashed tenant-scoped idempotency key",
		Subjects:    []string{events.CommandSubject},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.CommandRetention,
		Duplicates:  t.DedupWindow,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
		Discard:     jetstream.DiscardOld,
		AllowDirect: t.directReads(),
		MaxMsgSize:  1 << 20,
		// Batchers may group concurrent commands into atomic batches.
		AllowAtomicPublish: true,
	}
}

// EventStreamConfig is the configuration of ORDER_EVENTS.
func (t Topology) EventStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.EventStream,
		Description: "orderly order events (CloudEvents 1.0 JSON); the source of truth",
		Subjects:    []string{events.EventSubjects},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.EventRetention,
		// One event per order is enforced by the expected last subject sequence,
		// for ever; the msg-ID window only has to cover a publish retried at
		// once, and each remembered ID costs memory.
		Duplicates:         eventDedupWindow,
		Storage:            jetstream.FileStorage,
		Replicas:           t.Replicas,
		Discard:            jetstream.DiscardOld,
		AllowDirect:        t.directReads(),
		DenyDelete:         true,
		DenyPurge:          true,
		AllowAtomicPublish: true,
	}
}

// DeadLetterStreamConfig is the configuration of ORDER_COMMANDS_DLQ.
func (t Topology) DeadLetterStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.DeadLetterStream,
		Description: "orderly commands that failed permanently; header reason_poisoned says why",
		Subjects:    []string{events.DeadLetterSubjects},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.DeadLetterRetention,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
		AllowDirect: t.directReads(),
	}
}

// directReads says whether reads may go to any replica (direct get). A
// follower may be behind: the API reads a command right after its PubAck and a
// key's result right before it publishes, so with replicas only the leader
// answers reads. A single replica is always its own leader.
func (t Topology) directReads() bool { return t.Replicas == 1 }

// eventDedupWindow is the duplicate window of ORDER_EVENTS.
const eventDedupWindow = 10 * time.Second

// ResultsConfig is the configuration of the ORDER_RESULTS bucket.
func (t Topology) ResultsConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      events.ResultsBucket,
		Description: "hashed tenant-scoped idempotency key -> claim and stored response",
		TTL:         t.ResultTTL,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
	}
}

// ProcessorConsumerConfig is the durable consumer the processors share. It
// never gives up on a command by itself: the processor's pipeline decides
// when a command is poison, and acks it only once it is dead-lettered.
func (t Topology) ProcessorConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ProcessorConsumer,
		Description:   "orderly processors: CreateOrder -> OrderCreated | OrderRejected",
		FilterSubject: events.CommandSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4096,
		Replicas:      t.Replicas,
	}
}

// ProjectorConsumerConfig is the durable consumer the projectors share. It never
// gives up on an event: a read model that skipped one would be wrong for ever.
func (t Topology) ProjectorConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ProjectorConsumer,
		Description:   "orderly projectors: events -> ORDER_RESULTS",
		FilterSubject: events.EventSubjects,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4096,
		Replicas:      t.Replicas,
	}
}

// Ensure creates every stream, bucket and consumer, or updates it to t. It is
// idempotent: every start of orderly calls it.
func (t Topology) Ensure(ctx context.Context, js jetstream.JetStream) error {
	if err := t.Validate(); err != nil {
		return err
	}
	for _, cfg := range []jetstream.StreamConfig{t.CommandStreamConfig(), t.EventStreamConfig(), t.DeadLetterStreamConfig()} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, t.ResultsConfig()); err != nil {
		return fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	// The bucket's stream must accept atomic batches too, and read from the
	// leader when replicated; the KV API has no setting for either.
	kvStream, err := js.Stream(ctx, "KV_"+events.ResultsBucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	if cfg := kvStream.CachedInfo().Config; !cfg.AllowAtomicPublish || cfg.AllowDirect != t.directReads() {
		cfg.AllowAtomicPublish, cfg.AllowDirect = true, t.directReads()
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("bucket %s: stream settings: %w", events.ResultsBucket, err)
		}
	}
	consumers := []struct {
		stream string
		cfg    jetstream.ConsumerConfig
	}{
		{events.CommandStream, t.ProcessorConsumerConfig()},
		{events.EventStream, t.ProjectorConsumerConfig()},
	}
	for _, c := range consumers {
		if _, err := js.CreateOrUpdateConsumer(ctx, c.stream, c.cfg); err != nil {
			return fmt.Errorf("consumer %s on %s: %w", c.cfg.Durable, c.stream, err)
		}
	}
	return nil
}
