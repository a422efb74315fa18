package server

import (
	"context"
	"fmt"
	"time"

	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/projections"
)

// keyAnswers is where the API finds a key's answer: the key's record in
// ORDER_RESULTS (orders of the nonce form), else its last keyed event, the
// claim of a keyed order (ADR 0010), rendered as the processor rendered its
// decision and answering for the result TTL from the decision's time. The
// bucket is read first unless this process has seen no record in it since it
// started (then it holds none but what its feed has yet to deliver, which
// the broker's window and the claim cover, as for KnownNew).
type keyAnswers struct {
	bucket *jsstore.Results
	events *jsstore.Events
	ttl    time.Duration
	now    func() time.Time
	// bucketMayHold, when set, says whether the bucket can hold the record
	// at all (hub.BucketMayHold): a deployment of keyed orders only skips
	// its read, one round trip of the two an uncached answer takes.
	bucketMayHold func() bool
}

func (k keyAnswers) Get(ctx context.Context, key string) (idempotency.Record, bool, error) {
	if k.bucketMayHold == nil || k.bucketMayHold() {
		if r, ok, err := k.bucket.Get(ctx, key); err != nil || ok {
			return r, ok, err
		}
	}
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
