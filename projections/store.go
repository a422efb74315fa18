package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/natsx"
)

// Store reads and writes the read model ORDER_RESULTS. It is safe for
// concurrent use.
type Store struct {
	js        jetstream.JetStream
	pub       natsx.Publisher
	results   jetstream.KeyValue
	resultTTL time.Duration
}

// WithPublisher returns a store that writes through pub (a natsx.Batcher, say)
// and reads as s does.
func (s *Store) WithPublisher(pub natsx.Publisher) *Store {
	c := *s
	c.pub = pub
	return &c
}

// OpenStore binds to the bucket, which must exist (natsx.Topology.Ensure).
func OpenStore(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	results, err := js.KeyValue(ctx, events.ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	st, err := results.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	return &Store{js: js, pub: js, results: results, resultTTL: st.TTL()}, nil
}

// ResultTTL is how long a result lives after it was stored.
func (s *Store) ResultTTL() time.Duration { return s.resultTTL }

// Result returns the value of key in ORDER_RESULTS; ok is false when there is none.
func (s *Store) Result(ctx context.Context, key string) (r Result, ok bool, err error) {
	e, err := s.results.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Result{}, false, nil
	}
	if err != nil {
		return Result{}, false, err
	}
	r, err = DecodeResult(e.Value())
	if err != nil {
		return Result{}, false, err
	}
	r.Stored = e.Created()
	return r, true, nil
}

// Claim atomically creates key with claim when the key has no value (first
// writer wins). When it has one, Claim returns it with won false.
//
// It is one publish with an expected last subject sequence of 0 (what a KV
// Create does, without the extra read nats.go's Create makes on a conflict);
// a conflict costs one read of the holder.
func (s *Store) Claim(ctx context.Context, key string, claim Result) (existing Result, won bool, err error) {
	msg := &nats.Msg{Subject: resultsSubject + key, Data: claim.Encode()}
	natsx.SetExpectLastSubjectSeq(msg, 0, "")
	_, err = s.pub.PublishMsg(ctx, msg)
	if err == nil {
		return claim, true, nil
	}
	if !natsx.IsWrongLastSequence(err) {
		return Result{}, false, err
	}
	existing, ok, err := s.Result(ctx, key)
	if err != nil || ok {
		return existing, false, err
	}
	// The key's last message is a delete marker (deleted by hand, or expired in
	// between): the KV Create takes over such a key atomically.
	if _, err := s.results.Create(ctx, key, claim.Encode()); err == nil {
		return claim, true, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return Result{}, false, err
	}
	existing, ok, err = s.Result(ctx, key)
	if err == nil && !ok {
		err = fmt.Errorf("claim %s: the key keeps changing", key)
	}
	return existing, false, err
}

// resultsSubject prefixes the subjects of the bucket's values.
const resultsSubject = "$KV." + events.ResultsBucket + "."

// SaveResult writes result under key. Writing the same value again is harmless.
func (s *Store) SaveResult(ctx context.Context, key string, result Result) error {
	_, err := s.pub.PublishMsg(ctx, &nats.Msg{Subject: resultsSubject + key, Data: result.Encode()})
	return err
}
