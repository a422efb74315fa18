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

// Store reads and writes the two read models, ORDER_RESULTS and ORDERS. It is
// safe for concurrent use.
type Store struct {
	js        jetstream.JetStream
	results   jetstream.KeyValue
	orders    jetstream.KeyValue
	resultTTL time.Duration
}

// OpenStore binds to the buckets, which must exist (natsx.Topology.Ensure).
func OpenStore(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	results, err := js.KeyValue(ctx, events.ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	orders, err := js.KeyValue(ctx, events.OrdersBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.OrdersBucket, err)
	}
	st, err := results.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", events.ResultsBucket, err)
	}
	return &Store{js: js, results: results, orders: orders, resultTTL: st.TTL()}, nil
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
	_, err = s.js.PublishMsg(ctx, &nats.Msg{Subject: resultsSubject + key, Data: claim.Encode()},
		jetstream.WithExpectLastSequencePerSubject(0))
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

// Subjects of the buckets' values.
const (
	resultsSubject = "$KV." + events.ResultsBucket + "."
	ordersSubject  = "$KV." + events.OrdersBucket + "."
)

// Order returns the value of orderID in ORDERS; ok is false when there is none.
func (s *Store) Order(ctx context.Context, orderID string) (o Order, ok bool, err error) {
	if !events.ValidOrderID(orderID) {
		return Order{}, false, nil
	}
	e, err := s.orders.Get(ctx, orderID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, err
	}
	o, err = DecodeOrder(e.Value())
	return o, err == nil, err
}

// Save writes order under orderID and, when result is not nil, result under
// key, both at once (one round trip). Writing the same values again is harmless.
func (s *Store) Save(ctx context.Context, orderID string, order Order, key string, result *Result) error {
	futures := make([]jetstream.PubAckFuture, 0, 2)
	f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: ordersSubject + orderID, Data: order.Encode()})
	if err != nil {
		return err
	}
	futures = append(futures, f)
	if result != nil {
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: resultsSubject + key, Data: result.Encode()})
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
