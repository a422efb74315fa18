package server

import (
	"context"
	"fmt"
	"time"

	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/projections"
)

// keyAnswers is where the API finds a key's answer: its last keyed event,
// the claim of a keyed order (ADR 0010), rendered as the processor rendered
// its decision and answering for the result TTL from the decision's time,
// else the key's record in ORDER_RESULTS (orders of the nonce form). The
// event comes first: a deployment created with keyed IDs never writes the
// bucket, so an answer not in the API's cache is one read there, not two.
// The bucket is read whenever the key has no live keyed answer, even when it
// looked empty a moment ago: a processor of the nonce form writes to it from
// another process, and an answer must see a record stored before the read.
// (Both can hold a live answer of one key only if a keyed order and a nonce
// claim raced, during a switch of forms; the keyed one is answered.)
type keyAnswers struct {
	bucket *jsstore.Results
	events *jsstore.Events
	ttl    time.Duration
	now    func() time.Time
}

func (k keyAnswers) Get(ctx context.Context, key string) (idempotency.Record, bool, error) {
	if r, ok, err := k.keyed(ctx, key); err != nil || ok {
		return r, ok, err
	}
	return k.bucket.Get(ctx, key)
}

// keyed is the key's answer from its last keyed event; ok is false when it
// has none, or one older than the result TTL (the key is free).
func (k keyAnswers) keyed(ctx context.Context, key string) (idempotency.Record, bool, error) {
	ev, ok, err := k.events.KeyEvent(ctx, key)
	if err != nil || !ok {
		return idempotency.Record{}, false, err
	}
	p, err := projections.Project(ev.Data)
	if err != nil {
		return idempotency.Record{}, false, fmt.Errorf("the keyed event of key %s: %w", key, err)
	}
	if p.Record == nil || p.Key != key {
		return idempotency.Record{}, false, nil // no answer of this key (keyed orders store no other event)
	}
	r := *p.Record
	r.Stored = p.At // its time counts from the decision, as the processor counts it
	if r.Expired(k.ttl, k.now()) {
		return idempotency.Record{}, false, nil // the key is free
	}
	return r, true, nil
}
