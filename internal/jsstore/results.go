package jsstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// Results is the ORDER_RESULTS bucket: hashed key -> idempotency.Record. It is
// safe for concurrent use.
type Results struct {
	js     jetstream.JetStream
	pub    Publisher
	kv     jetstream.KeyValue
	stream jetstream.Stream
	ttl    time.Duration
	// emptyAt is when the bucket last held no message; checkedAt when it was
	// last looked at; wroteAt when this process last wrote to it
	// (MayHoldRecords).
	emptyAt, checkedAt, wroteAt atomic.Int64
}

// resultsSubject prefixes the subjects of the bucket's values.
const resultsSubject = "$KV." + events.ResultsBucket + "."

// OpenResults binds to the bucket, which must exist (Topology.Ensure). Writes
// go through pub (js itself, or a Batcher).
func OpenResults(ctx context.Context, js jetstream.JetStream, pub Publisher) (*Results, error) {
	kv, err := js.KeyValue(ctx, events.ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	stream, err := js.Stream(ctx, ResultsStream)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	return &Results{js: js, pub: pub, kv: kv, stream: stream, ttl: st.TTL()}, nil
}

// TTL is the bucket's time to live: how long a record answers retries.
func (r *Results) TTL() time.Duration { return r.ttl }

// Get returns the record of key; ok is false when the key has none. Errors
// are *StoreError.
func (r *Results) Get(ctx context.Context, key string) (rec idempotency.Record, ok bool, err error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return idempotency.Record{}, false, nil
	}
	if err != nil {
		return idempotency.Record{}, false, storeErr(err)
	}
	return decodeEntry(e)
}

func decodeEntry(e jetstream.KeyValueEntry) (idempotency.Record, bool, error) {
	rec, err := idempotency.Decode(e.Value())
	if err != nil {
		return idempotency.Record{}, false, fmt.Errorf("key %s: %w", e.Key(), err)
	}
	rec.Stored = e.Created()
	return rec, true, nil
}

// Claim atomically creates key with claim when the key has no record (first
// writer wins). When it has one, Claim returns it with won false.
//
// It is one publish with an expected last subject sequence of 0 (what a KV
// Create does, without the extra read nats.go's Create makes on a conflict);
// a conflict costs one read of the holder. A publish unanswered within an
// attempt is sent again (PublishAll, which says which copy's answer counts).
func (r *Results) Claim(ctx context.Context, key string, claim idempotency.Record) (existing idempotency.Record, won bool, err error) {
	r.writing()
	return r.claimed(ctx, key, claim, PublishAll(ctx, r.pub, []*nats.Msg{claimMsg(key, claim)})[0].Err)
}

// ClaimRequest is one claim of ClaimAll: Claim(ctx, Key, Record). It and
// ClaimOutcome are aliases of unnamed struct types, the same types as
// processor.ClaimRequest and processor.ClaimOutcome, so that Results is the
// processor's BatchClaims port without either package importing the other.
type ClaimRequest = struct {
	Key    string
	Record idempotency.Record
}

// ClaimOutcome is the outcome of one claim of ClaimAll: what Claim returns.
type ClaimOutcome = struct {
	Holder idempotency.Record
	Won    bool
	Err    error
}

// ClaimAll makes the claims at once, each as Claim does: their publishes go
// out together and are waited for once; a conflict costs a read of its
// holder, as in Claim. Two claims of one key: the first stored wins.
func (r *Results) ClaimAll(ctx context.Context, reqs []ClaimRequest) []ClaimOutcome {
	r.writing()
	msgs := make([]*nats.Msg, len(reqs))
	for i, q := range reqs {
		msgs[i] = claimMsg(q.Key, q.Record)
	}
	res := make([]ClaimOutcome, len(reqs))
	for i, p := range PublishAll(ctx, r.pub, msgs) {
		res[i].Holder, res[i].Won, res[i].Err = r.claimed(ctx, reqs[i].Key, reqs[i].Record, p.Err)
	}
	return res
}

// claimMsg is the claim of key: its record, expecting the key to have none.
func claimMsg(key string, claim idempotency.Record) *nats.Msg {
	msg := &nats.Msg{Subject: resultsSubject + key, Data: claim.Encode()}
	SetExpectLastSubjectSeq(msg, 0, "")
	return msg
}

// claimed is the outcome of the claim of key whose publish returned err.
func (r *Results) claimed(ctx context.Context, key string, claim idempotency.Record, err error) (existing idempotency.Record, won bool, _ error) {
	if err == nil {
		return claim, true, nil
	}
	if !IsWrongLastSequence(err) {
		return idempotency.Record{}, false, err
	}
	existing, ok, err := r.Get(ctx, key)
	if err != nil || ok {
		return existing, false, err
	}
	// The key's last message is a delete marker (deleted by hand, or expired in
	// between): the KV Create takes over such a key atomically.
	if _, err := r.kv.Create(ctx, key, claim.Encode()); err == nil {
		return claim, true, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return idempotency.Record{}, false, err
	}
	existing, ok, err = r.Get(ctx, key)
	if err == nil && !ok {
		err = fmt.Errorf("claim %s: the key keeps changing", key)
	}
	return existing, false, err
}

// Save writes rec under key. Writing the same value again is harmless, and
// so a write unanswered within an attempt is sent again (PublishAll). It
// publishes to the bucket's subject itself, without the KV client's check
// of the key, so it refuses a key that is not a key hash: "a.>" would be
// stored under a wildcard subject.
func (r *Results) Save(ctx context.Context, key string, rec idempotency.Record) error {
	if !idempotency.ValidKeyHash(key) {
		return fmt.Errorf("save %q: %w", key, jetstream.ErrInvalidKey)
	}
	r.writing()
	return PublishAll(ctx, r.pub, []*nats.Msg{{Subject: resultsSubject + key, Data: rec.Encode()}})[0].Err
}

// Revision is the record of key with its revision in the bucket; ok is false
// when the key has none.
func (r *Results) Revision(ctx context.Context, key string) (rec idempotency.Record, revision uint64, ok bool, err error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return idempotency.Record{}, 0, false, nil
	}
	if err != nil {
		return idempotency.Record{}, 0, false, storeErr(err)
	}
	rec, ok, err = decodeEntry(e)
	return rec, e.Revision(), ok, err
}

// ErrChanged says that a key changed since its revision was read.
var ErrChanged = errors.New("the key changed since it was read")

// Evict deletes key if its record is still at revision (a processor that
// decides the order in between wins), so that the next request with the key
// is processed as new. It wraps ErrChanged when the key moved on.
func (r *Results) Evict(ctx context.Context, key string, revision uint64) error {
	err := r.kv.Delete(ctx, key, jetstream.LastRevision(revision))
	if IsWrongLastSequence(err) {
		return fmt.Errorf("evict %s: %w", key, ErrChanged)
	}
	return err
}

// Purge removes key and its history.
func (r *Results) Purge(ctx context.Context, key string) error {
	return r.kv.Purge(ctx, key)
}

// Watch calls f with the records stored after Watch returns, in order, from
// one goroutine, until the feed is stopped: one server consumer whatever f
// does with them. The bucket keeps one record per key, so a record replaced
// before its delivery is skipped: f always gets the latest record of a key,
// not every one it had. Records that cannot be decoded are passed to bad.
//
// It is an ordered consumer with a heartbeat every second: when the server
// that carries it goes away, the client notices the missing heartbeats and
// recreates it where the stream lives, from the last record it delivered.
// live reports whether the feed is live (see Feed.Err).
func (r *Results) Watch(ctx context.Context, f func(key string, rec idempotency.Record), bad func(key string, err error)) (stop func(), live func() error, err error) {
	return follow(ctx, r.js, ResultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{resultsSubject + ">"}, DeliverPolicy: jetstream.DeliverNewPolicy,
	}, func(m jetstream.Msg) {
		if op := m.Headers().Get(kvOperationHeader); op != "" {
			return // a delete or purge marker
		}
		key := strings.TrimPrefix(m.Subject(), resultsSubject)
		rec, err := idempotency.Decode(m.Data())
		if err != nil {
			bad(key, err)
			return
		}
		if md, err := m.Metadata(); err == nil {
			rec.Stored = md.Timestamp
		}
		f(key, rec)
	})
}

// Keys calls f, from one goroutine, with every key that has a record now and
// the time it was written, then returns: one headers-only ordered consumer
// that delivers the last message of each key, read until nothing is pending.
func (r *Results) Keys(ctx context.Context, f func(key string, at time.Time)) error {
	err := readAll(ctx, r.js, ResultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{resultsSubject + ">"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, HeadersOnly: true,
	}, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		if m.Headers().Get(kvOperationHeader) == "" { // not a delete or purge marker
			f(strings.TrimPrefix(m.Subject(), resultsSubject), md.Timestamp)
		}
	})
	if err != nil {
		return fmt.Errorf("keys of %s: %w", events.ResultsBucket, err)
	}
	return nil
}

// readAll reads stream through an ordered consumer of cfg, calling f from
// one goroutine with each message, until nothing is pending (from the
// moment it starts), and deletes the consumer. Errors are *StoreError when
// NATS made them.
func readAll(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig, f func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return storeErr(err)
	}
	defer DeleteOrdered(js, stream, cons) // after the iterator's Stop below
	info, err := cons.Info(ctx)
	if err != nil {
		return storeErr(err)
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return storeErr(err)
	}
	defer it.Stop()
	for {
		m, ok, err := NextPending(ctx, cons, it)
		if err != nil {
			return storeErr(err)
		}
		if !ok {
			return nil
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		f(m, md)
		if md.NumPending == 0 {
			return nil
		}
	}
}

// NextPending is the next message of it, an iterator over cons that reads
// what cons had pending when it was made; ok is false once the server has
// nothing left to deliver. Messages that expire (or are removed) before
// they are delivered never come, so a reader that waited for a message
// whose metadata says nothing more is pending would wait for ever when the
// last ones go: this looks at cons every second it waits.
func NextPending(ctx context.Context, cons jetstream.Consumer, it jetstream.MessagesContext) (m jetstream.Msg, ok bool, err error) {
	for {
		m, err := it.Next(jetstream.NextMaxWait(time.Second))
		if !errors.Is(err, nats.ErrTimeout) {
			return m, err == nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, false, err
		}
		if info.NumPending == 0 {
			// A message delivered just before the look came before its
			// answer on the connection: take it, if one did.
			m, err := it.Next(jetstream.NextMaxWait(50 * time.Millisecond))
			if errors.Is(err, nats.ErrTimeout) {
				return nil, false, nil
			}
			return m, err == nil, err
		}
	}
}

// writing notes that this process writes to the bucket (see MayHoldRecords).
func (r *Results) writing() { r.wroteAt.Store(time.Now().UnixNano()) }

// MayHoldRecords reports whether the bucket may hold a record: false only
// when it held no message at its last look, at most a second ago, and this
// process has written nothing to it for longer than the result TTL (every
// record expired, as once every order is keyed for longer than that). A keyed order skips
// the read of its key's record then (ADR 0010). Another process may write a
// record within that second; ADR 0010 says why that is covered.
func (r *Results) MayHoldRecords(ctx context.Context) bool {
	now := time.Now().UnixNano()
	if now-r.wroteAt.Load() < int64(r.ttl+time.Minute) {
		return true // what this process wrote may be there still
	}
	if seen := r.emptyAt.Load(); seen != 0 && now-seen < int64(time.Second) {
		return false
	}
	if checked := r.checkedAt.Load(); now-checked < int64(time.Second) {
		return true
	}
	r.checkedAt.Store(now)
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := r.stream.Info(ctx)
	if err != nil || info.State.Msgs > 0 {
		r.emptyAt.Store(0)
		return true
	}
	r.emptyAt.Store(now)
	return now-r.wroteAt.Load() < int64(r.ttl+time.Minute) // a write since the look
}

// kvOperationHeader marks the delete and purge markers of a bucket.
const kvOperationHeader = "KV-Operation"

// Snapshot calls f with every current record (one watch, no per-key reads).
func (r *Results) Snapshot(ctx context.Context, f func(key string, value []byte)) error {
	w, err := r.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read %s: %w", r.kv.Bucket(), err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("read %s: watch closed", r.kv.Bucket())
			}
			if e == nil { // all current values delivered
				return nil
			}
			f(e.Key(), e.Value())
		}
	}
}
