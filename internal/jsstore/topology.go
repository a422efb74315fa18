package jsstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// ResultsStream is the stream behind the ORDER_RESULTS bucket.
const ResultsStream = "KV_" + events.ResultsBucket

// Topology is the set of streams, the bucket and the durable consumers orderly
// runs on, and how Ensure treats the ones that exist.
//
// Fields come in three kinds. Those this version of orderly depends on for
// correctness (subjects, retention policy, explicit acks, consumers that never
// give up on a message, reads from the leader when replicated) are always set,
// to the same values by every orderly process, so no two processes disagree.
// The tunables (windows, retentions, TTL, ack wait) are this process's
// configuration: they are used when an object is created; on an existing
// object a different value is reported and left alone, unless Update is set.
// Replicas are never changed without Update, and a difference is an error.
type Topology struct {
	// Replicas of every stream, the bucket and the consumers: 1 standalone, 3
	// on a cluster. 0 uses 1 when creating and leaves existing objects as they
	// are; any other value must match the existing objects, unless Update.
	Replicas int
	// Update lets Ensure bring the tunables and the replicas of existing
	// objects to this configuration (--update-topology).
	Update bool
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
	// Projector makes Ensure create the projector's durable consumer too. The
	// projector is optional (ADR 0009): the processor stores each key's
	// response itself. Ensure never deletes the consumer.
	Projector bool
	// OrderIDs, when set (OrderIDsNonce or OrderIDsKeyed), is stored as the
	// form of the IDs of new orders, which APIs with --order-ids auto follow
	// (ADR 0010): Ensure writes it to the command stream, also an existing
	// one. Empty leaves an existing stream's as it is; a new stream stores
	// OrderIDsKeyed (no processor of a version before keyed IDs can run on a
	// topology this version created).
	OrderIDs string
}

// The forms of order IDs (ADR 0010), and the command stream's metadata key
// that stores the form new orders take.
const (
	OrderIDsNonce = "nonce"
	OrderIDsKeyed = "keyed"
	OrderIDsKey   = "orderly_order_ids"
)

// StoredOrderIDs is the form of the IDs of new orders stored with the
// command stream: OrderIDsKeyed, or OrderIDsNonce (also for a stream that
// stores none: one created before keyed IDs).
func StoredOrderIDs(ctx context.Context, js jetstream.JetStream) (string, error) {
	s, err := js.Stream(ctx, events.CommandStream)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", events.CommandStream, storeErr(err))
	}
	return OrderIDsOf(s.CachedInfo().Config), nil
}

// OrderIDsOf is the form of order IDs that the command stream's config
// stores: keyed, or nonce when it names none (a topology created before
// keyed IDs).
func OrderIDsOf(cfg jetstream.StreamConfig) string {
	if cfg.Metadata[OrderIDsKey] == OrderIDsKeyed {
		return OrderIDsKeyed
	}
	return OrderIDsNonce
}

// DefaultTopology is the topology of a standalone orderly.
func DefaultTopology() Topology {
	return Topology{
		DedupWindow:      2 * time.Minute,
		CommandRetention: 72 * time.Hour,
		ResultTTL:        24 * time.Hour,
		EventRetention:   7 * 24 * time.Hour,
		AckWait:          10 * time.Second,
	}
}

// Validate reports every problem with t.
func (t Topology) Validate() error {
	var errs []error
	if t.Replicas < 0 || t.Replicas > 5 {
		errs = append(errs, fmt.Errorf("--replicas must be 0 (as they are) or 1 to 5, got %d", t.Replicas))
	}
	if t.DedupWindow < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--dedup-window must be at least 100ms, got %s", t.DedupWindow))
	}
	if t.CommandRetention < t.DedupWindow {
		errs = append(errs, fmt.Errorf("--command-retention (%s) must be at least --dedup-window (%s): a retry inside the window must find its command", t.CommandRetention, t.DedupWindow))
	}
	if t.ResultTTL < t.DedupWindow {
		errs = append(errs, fmt.Errorf("--result-ttl (%s) must be at least --dedup-window (%s): a retry inside the window must find its result", t.ResultTTL, t.DedupWindow))
	}
	if t.EventRetention < 0 || t.DeadLetterRetention < 0 {
		errs = append(errs, fmt.Errorf("retention must not be negative: --event-retention %s, dead letters %s", t.EventRetention, t.DeadLetterRetention))
	}
	if t.OrderIDs != "" && t.OrderIDs != OrderIDsNonce && t.OrderIDs != OrderIDsKeyed {
		errs = append(errs, fmt.Errorf("--order-ids must be %s or %s, got %q", OrderIDsNonce, OrderIDsKeyed, t.OrderIDs))
	}
	if t.EventRetention > 0 && t.EventRetention < t.ResultTTL {
		errs = append(errs, fmt.Errorf("--event-retention (%s) must be at least --result-ttl (%s): a stored result needs its event", t.EventRetention, t.ResultTTL))
	}
	if t.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack wait must be at least 1s, got %s", t.AckWait))
	}
	return errors.Join(errs...)
}

// replicas is the replica count for creating an object.
func (t Topology) replicas() int { return max(t.Replicas, 1) }

// directReads says whether reads may go to any replica (direct get). A
// follower may be behind: the API reads a command right after its PubAck and a
// key's result right before it publishes, so with replicas only the leader
// answers reads. A single replica is always its own leader.
func directReads(replicas int) bool { return replicas <= 1 }

// CommandStreamConfig is the configuration of ORDER_COMMANDS.
func (t Topology) CommandStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.CommandStream,
		Description: "orderly CreateOrder commands; Nats-Msg-Id is the hashed tenant-scoped idempotency key",
		Subjects:    []string{events.CommandSubjects},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.CommandRetention,
		Duplicates:  t.DedupWindow,
		Storage:     jetstream.FileStorage,
		Replicas:    t.replicas(),
		Discard:     jetstream.DiscardOld,
		AllowDirect: directReads(t.replicas()),
		MaxMsgSize:  1 << 20,
		// Batchers may group concurrent commands into atomic batches.
		AllowAtomicPublish: true,
		Metadata:           map[string]string{OrderIDsKey: cmp.Or(t.OrderIDs, OrderIDsKeyed)},
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
		Duplicates:         within(eventDedupWindow, t.EventRetention),
		Storage:            jetstream.FileStorage,
		Replicas:           t.replicas(),
		Discard:            jetstream.DiscardOld,
		AllowDirect:        directReads(t.replicas()),
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
		// A dead letter's ID is the original's stream and sequence: the window
		// drops a dead letter written twice for one message, never two messages.
		Duplicates:  2 * time.Minute,
		Storage:     jetstream.FileStorage,
		Replicas:    t.replicas(),
		AllowDirect: directReads(t.replicas()),
	}
}

// eventDedupWindow is the duplicate window of ORDER_EVENTS.
const eventDedupWindow = 10 * time.Second

// within is the duplicate window d of a stream whose messages are kept for
// maxAge (0: for ever): no longer than they are kept, which the server
// requires.
func within(d, maxAge time.Duration) time.Duration {
	if maxAge > 0 && maxAge < d {
		return maxAge
	}
	return d
}

// ResultsStreamConfig is the configuration of the stream behind the
// ORDER_RESULTS bucket: what nats.go's CreateKeyValue makes for a bucket with
// history 1 and TTL ResultTTL, plus atomic publish (for batched writes) and,
// with replicas, reads from the leader. Ensure creates it with these settings
// at once, so that nothing is toggled where another process can see it.
func (t Topology) ResultsStreamConfig() jetstream.StreamConfig {
	dup := 2 * time.Minute
	if t.ResultTTL < dup {
		dup = t.ResultTTL
	}
	return jetstream.StreamConfig{
		Name:               ResultsStream,
		Description:        "orderly ORDER_RESULTS bucket: hashed tenant-scoped idempotency key -> claim and stored response",
		Subjects:           []string{resultsSubject + ">"},
		MaxMsgsPerSubject:  1,
		MaxBytes:           -1,
		MaxAge:             t.ResultTTL,
		MaxMsgSize:         -1,
		MaxMsgs:            -1,
		MaxConsumers:       -1,
		Storage:            jetstream.FileStorage,
		Replicas:           t.replicas(),
		AllowRollup:        true,
		DenyDelete:         true,
		Duplicates:         dup,
		AllowDirect:        directReads(t.replicas()),
		Discard:            jetstream.DiscardNew,
		AllowAtomicPublish: true,
	}
}

// ProcessorConsumerConfig is the durable consumer the processors share. It
// never gives up on a command by itself: the processor's pipeline decides
// when a command is poison, and acks it only once it is dead-lettered.
func (t Topology) ProcessorConsumerConfig() jetstream.ConsumerConfig {
	return t.consumer(ProcessorConsumer, "orderly processors: CreateOrder -> OrderCreated | OrderRejected", events.CommandSubjects)
}

// ProjectorConsumerConfig is the durable consumer the projectors share. It never
// gives up on an event: a read model that skipped one would be wrong for ever.
func (t Topology) ProjectorConsumerConfig() jetstream.ConsumerConfig {
	return t.consumer(ProjectorConsumer, "orderly projectors: events -> ORDER_RESULTS", events.EventSubjects)
}

func (t Topology) consumer(name, description, filter string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   description,
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4096,
		Replicas:      t.replicas(),
	}
}

// resumeProcessor is where a processor consumer made again starts: the
// sequence of ORDER_COMMANDS below which the processors had handled every
// command, as the newest event says (events.HeaderDecidedBelow; they read
// it from their consumer's acknowledgement floor before they stored the
// event, so it is at most the floor when the consumer was removed). ok is
// false, and the consumer delivers every retained command, when no event
// says it, or says a sequence ORDER_COMMANDS has not reached (a stream made
// again since).
func resumeProcessor(ctx context.Context, js jetstream.JetStream) (uint64, bool) {
	evs, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return 0, false
	}
	m, err := evs.GetLastMsgForSubject(ctx, events.EventSubjects)
	if err != nil {
		return 0, false
	}
	seq, err := strconv.ParseUint(m.Header.Get(events.HeaderDecidedBelow), 10, 64)
	if err != nil || seq <= 1 {
		return 0, false
	}
	cmds, err := js.Stream(ctx, events.CommandStream)
	if err != nil || seq > cmds.CachedInfo().State.LastSeq+1 {
		return 0, false
	}
	return seq, true
}

// ErrReplicas is returned by Ensure when --replicas differs from the existing
// objects and Update is not set.
var ErrReplicas = errors.New("replicas differ from the existing streams")

// Ensure creates every stream, the bucket and every consumer that is
// missing, and brings the existing ones to what this version of orderly needs
// (see Topology). It makes no call for an object that is already right, so
// any number of processes may run it at once. It is idempotent: every start
// of orderly calls it.
func (t Topology) Ensure(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	for _, want := range []jetstream.StreamConfig{t.CommandStreamConfig(), t.EventStreamConfig(), t.DeadLetterStreamConfig(), t.ResultsStreamConfig()} {
		if err := t.ensureStream(ctx, js, want, logger); err != nil {
			return fmt.Errorf("stream %s: %w", want.Name, err)
		}
	}
	type durable struct {
		stream string
		want   jetstream.ConsumerConfig
		resume func(context.Context, jetstream.JetStream) (uint64, bool)
	}
	consumers := []durable{{events.CommandStream, t.ProcessorConsumerConfig(), resumeProcessor}}
	if t.Projector {
		consumers = append(consumers, durable{events.EventStream, t.ProjectorConsumerConfig(), nil})
	}
	for _, c := range consumers {
		if err := t.ensureConsumer(ctx, js, c.stream, c.want, c.resume, logger); err != nil {
			return fmt.Errorf("consumer %s on %s: %w", c.want.Durable, c.stream, err)
		}
	}
	return nil
}

// field is one setting of an existing object: whether it differs from what
// this process wants, and how to take the wanted value.
type field struct {
	name      string
	differs   bool
	have, got any
	apply     func()
}

// reconcile applies the required fields always and the tunables only with
// Update (else it logs them); it reports whether anything changed.
func (t Topology) reconcile(object string, required, tunable []field, logger *slog.Logger) bool {
	changed := false
	for _, f := range required {
		if f.differs {
			f.apply()
			changed = true
			logger.Info("topology: setting a field orderly needs", "object", object, "field", f.name, "from", f.have, "to", f.got)
		}
	}
	for _, f := range tunable {
		if !f.differs {
			continue
		}
		if !t.Update {
			logger.Warn("topology: existing setting differs from this process's configuration; left as it is (--update-topology changes it)",
				"object", object, "field", f.name, "existing", f.have, "configured", f.got)
			continue
		}
		f.apply()
		changed = true
		logger.Info("topology: updating", "object", object, "field", f.name, "from", f.have, "to", f.got)
	}
	return changed
}

// checkReplicas reports ErrReplicas when a replica count was asked for, differs
// from the existing one, and Update is not set.
func (t Topology) checkReplicas(object string, existing int) error {
	if t.Replicas == 0 || t.Replicas == existing || t.Update {
		return nil
	}
	return fmt.Errorf("%w: %s has %d, this process asks for %d; pass --update-topology to change it, or --replicas %d",
		ErrReplicas, object, existing, t.Replicas, existing)
}

func (t Topology) ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, logger *slog.Logger) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		} else if err == nil {
			logger.Info("topology: created stream", "stream", want.Name, "replicas", want.Replicas)
			return nil
		}
		// Another process created it a moment ago: treat it as existing.
		if s, err = js.Stream(ctx, want.Name); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	have := s.CachedInfo().Config
	if err := t.checkReplicas(want.Name, have.Replicas); err != nil {
		return err
	}
	next := have
	replicas := have.Replicas
	if t.Update && t.Replicas > 0 {
		replicas = t.Replicas
	}
	required := []field{
		{"subjects", !slices.Equal(have.Subjects, want.Subjects), have.Subjects, want.Subjects, func() { next.Subjects = want.Subjects }},
		{"retention", have.Retention != want.Retention, have.Retention, want.Retention, func() { next.Retention = want.Retention }},
		{"allow_direct", have.AllowDirect != directReads(replicas), have.AllowDirect, directReads(replicas), func() { next.AllowDirect = directReads(replicas) }},
		{"allow_atomic", have.AllowAtomicPublish != want.AllowAtomicPublish, have.AllowAtomicPublish, want.AllowAtomicPublish, func() { next.AllowAtomicPublish = want.AllowAtomicPublish }},
		{"deny_delete", want.DenyDelete && !have.DenyDelete, have.DenyDelete, true, func() { next.DenyDelete = true }},
		{"deny_purge", want.DenyPurge && !have.DenyPurge, have.DenyPurge, true, func() { next.DenyPurge = true }},
		{"max_msgs_per_subject", want.MaxMsgsPerSubject != 0 && have.MaxMsgsPerSubject != want.MaxMsgsPerSubject, have.MaxMsgsPerSubject, want.MaxMsgsPerSubject, func() { next.MaxMsgsPerSubject = want.MaxMsgsPerSubject }},
		{"order_ids", t.OrderIDs != "" && want.Metadata[OrderIDsKey] != "" && have.Metadata[OrderIDsKey] != t.OrderIDs, have.Metadata[OrderIDsKey], t.OrderIDs, func() {
			next.Metadata = maps.Clone(have.Metadata)
			if next.Metadata == nil {
				next.Metadata = map[string]string{}
			}
			next.Metadata[OrderIDsKey] = t.OrderIDs
		}},
	}
	tunable := []field{
		{"max_age", have.MaxAge != want.MaxAge, have.MaxAge, want.MaxAge, func() { next.MaxAge = want.MaxAge }},
		{"duplicate_window", have.Duplicates != want.Duplicates, have.Duplicates, want.Duplicates, func() { next.Duplicates = want.Duplicates }},
		{"replicas", t.Replicas > 0 && have.Replicas != t.Replicas, have.Replicas, t.Replicas, func() { next.Replicas = t.Replicas }},
	}
	if !t.reconcile(want.Name, required, tunable, logger) {
		return nil
	}
	_, err = js.UpdateStream(ctx, next)
	return err
}

func (t Topology) ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig,
	resume func(context.Context, jetstream.JetStream) (uint64, bool), logger *slog.Logger) error {
	c, err := js.Consumer(ctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// A consumer made again (removed by hand, or not brought back by a
		// restore) starts where its messages were all handled, if the
		// stream's readers said so (resume), not at the first one.
		if resume != nil {
			if seq, ok := resume(ctx, js); ok {
				want.DeliverPolicy, want.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq
			}
		}
		// CreateConsumer succeeds when an identical consumer exists, so two
		// processes creating it at once both succeed (two that start it at
		// different sequences: the second finds the first's, below).
		if _, err := js.CreateConsumer(ctx, stream, want); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return err
		} else if err == nil {
			if want.OptStartSeq > 0 {
				logger.Info("topology: created consumer, from the first message not yet handled", "stream", stream, "consumer", want.Durable,
					"replicas", want.Replicas, "from_sequence", want.OptStartSeq)
			} else {
				logger.Info("topology: created consumer", "stream", stream, "consumer", want.Durable, "replicas", want.Replicas)
			}
			return nil
		}
		if c, err = js.Consumer(ctx, stream, want.Durable); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	have := c.CachedInfo().Config
	object := stream + "/" + want.Durable
	// A consumer's replicas follow its stream's when 0.
	haveReplicas := have.Replicas
	if err := t.checkReplicas(object, max(haveReplicas, 0)); err != nil && haveReplicas != 0 {
		return err
	}
	next := have
	required := []field{
		{"filter_subject", have.FilterSubject != want.FilterSubject, have.FilterSubject, want.FilterSubject, func() { next.FilterSubject = want.FilterSubject }},
		{"ack_policy", have.AckPolicy != want.AckPolicy, have.AckPolicy, want.AckPolicy, func() { next.AckPolicy = want.AckPolicy }},
		{"max_deliver", have.MaxDeliver != want.MaxDeliver, have.MaxDeliver, want.MaxDeliver, func() { next.MaxDeliver = want.MaxDeliver }},
	}
	tunable := []field{
		{"ack_wait", have.AckWait != want.AckWait, have.AckWait, want.AckWait, func() { next.AckWait = want.AckWait }},
		{"replicas", t.Replicas > 0 && haveReplicas != 0 && haveReplicas != t.Replicas, haveReplicas, t.Replicas, func() { next.Replicas = t.Replicas }},
	}
	if !t.reconcile(object, required, tunable, logger) {
		return nil
	}
	_, err = js.UpdateConsumer(ctx, stream, next)
	return err
}

// ErrMissing is returned by Check when a stream or consumer is not there.
var ErrMissing = errors.New("topology incomplete")

// Needs lists the streams and durable consumers that components use.
type Needs struct {
	API, Processor, Projector bool
}

// DomainHint is what to add to "orderly's streams are missing" when the
// JetStream that answered has a domain: orderly connected to a leaf node
// whose streams are in its hub's JetStream, without --nats-js-domain, finds
// the leaf's own. Empty when it has none, or does not say.
func DomainHint(ctx context.Context, js jetstream.JetStream) string {
	info, err := js.AccountInfo(ctx)
	if err != nil || info.Domain == "" {
		return ""
	}
	return fmt.Sprintf(" (this is JetStream domain %q: if orderly's streams are in another domain, such as a leaf node's hub, name it with --nats-js-domain)", info.Domain)
}

// Check reports whether what the components need exists, reading only: a
// role may not create or change the topology (`orderly setup` does, with
// the operator's credentials). It wraps ErrMissing when something is missing.
func Check(ctx context.Context, js jetstream.JetStream, n Needs) error {
	streams := map[string]bool{}
	var consumers [][2]string
	if n.API {
		streams[events.CommandStream], streams[events.EventStream], streams[ResultsStream] = true, true, true
	}
	if n.Processor {
		streams[events.CommandStream], streams[events.EventStream], streams[ResultsStream], streams[events.DeadLetterStream] = true, true, true, true
		consumers = append(consumers, [2]string{events.CommandStream, ProcessorConsumer})
	}
	if n.Projector {
		streams[events.EventStream], streams[ResultsStream] = true, true
		consumers = append(consumers, [2]string{events.EventStream, ProjectorConsumer})
	}
	var missing []string
	for name := range streams {
		if _, err := js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, "stream "+name)
		} else if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	allGone := len(missing) == len(streams)
	for _, c := range consumers {
		if _, err := js.Consumer(ctx, c[0], c[1]); errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, "consumer "+c[1]+" on "+c[0])
		} else if err != nil {
			return fmt.Errorf("consumer %s on %s: %w", c[1], c[0], err)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		hint := ""
		if allGone {
			hint = DomainHint(ctx, js)
		}
		return fmt.Errorf("%w: missing %s%s", ErrMissing, strings.Join(missing, ", "), hint)
	}
	return nil
}

// eventsConsumerName is the rule for the names of consumer services' durable
// consumers on ORDER_EVENTS: letters, digits, '-' and '_', at most 64.
var eventsConsumerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ErrEventsConsumerName is returned for a name CheckEventsConsumerName refuses.
var ErrEventsConsumerName = errors.New("a consumer name is 1 to 64 letters, digits, '-' or '_', and not one of orderly's own (processor, projector)")

// CheckEventsConsumerName refuses a name a consumer service's consumer may
// not have.
func CheckEventsConsumerName(name string) error {
	if !eventsConsumerName.MatchString(name) || name == ProcessorConsumer || name == ProjectorConsumer {
		return fmt.Errorf("%q: %w", name, ErrEventsConsumerName)
	}
	return nil
}

// EventsConsumerConfig is the durable pull consumer the operator makes on
// ORDER_EVENTS for a consumer service (orderly events consumer add): the
// events of kind (every kind when empty), from the first stored one or,
// with onlyNew, from its creation; explicit acks, never given up by the
// server (the service decides what a failure means), up to 1,000 in flight.
// Its replicas are the stream's.
func EventsConsumerConfig(name string, kind events.Kind, onlyNew bool) (jetstream.ConsumerConfig, error) {
	if err := CheckEventsConsumerName(name); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	filter := events.EventSubjects
	if kind != "" {
		filter = events.KindSubjects(kind)
	}
	deliver := jetstream.DeliverAllPolicy
	if onlyNew {
		deliver = jetstream.DeliverNewPolicy
	}
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "a consumer service's events (orderly events consumer add)",
		FilterSubject: filter,
		DeliverPolicy: deliver,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
	}, nil
}
