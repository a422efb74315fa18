package projections

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
)

// RebuildOptions configure Rebuild.
type RebuildOptions struct {
	// DryRun compares the read models with what the events say and changes
	// nothing.
	DryRun bool
	// Progress, when set, is called after every 1000 events with the count.
	Progress func(done, total uint64)
	// MaxDifferences bounds the differences listed in the report (all are counted).
	MaxDifferences int
}

// RebuildReport says what a rebuild found and did.
type RebuildReport struct {
	Events uint64 `json:"events"`
	// Results is the number of records the events call for.
	Results int `json:"results"`
	// Missing, Different and Stale count records absent from the live read
	// models, present with other bytes, or present without an event that calls
	// for them. Pending claims are not stale: claims are not events.
	Missing   int `json:"missing"`
	Different int `json:"different"`
	Stale     int `json:"stale"`
	// Written and Removed count the changes (0 in a dry run).
	Written int `json:"written"`
	Removed int `json:"removed"`
	// Differences lists the first differences, for humans.
	Differences []string `json:"differences,omitempty"`
}

// Equal reports whether the live read models equal the rebuilt ones.
func (r RebuildReport) Equal() bool { return r.Missing+r.Different+r.Stale == 0 }

type liveEntry struct {
	sum     [sha256.Size]byte
	pending bool
}

// Rebuild recomputes ORDER_RESULTS from ORDER_EVENTS with Project, the
// projector's own function, so a rebuilt record has exactly the bytes the
// projector writes. It compares every record with the live one, writes what is
// missing or different, and removes what no event calls for (never a pending
// claim, which belongs to a command still in flight). It is safe to run while
// orderly runs: the projector writes the same bytes. Results older than the
// result TTL are not rebuilt: their keys are free.
func Rebuild(ctx context.Context, js jetstream.JetStream, store *Store, opts RebuildOptions) (RebuildReport, error) {
	var rep RebuildReport
	kv := store.results
	live, err := readLive(ctx, kv)
	if err != nil {
		return rep, err
	}
	want := make(map[string]bool, len(live))
	differ := func(key, what string) {
		if len(rep.Differences) < opts.MaxDifferences {
			rep.Differences = append(rep.Differences, fmt.Sprintf("result %s: %s", key, what))
		}
	}
	err = eachEvent(ctx, js, func(data []byte, total uint64) error {
		rep.Events++
		if opts.Progress != nil && rep.Events%1000 == 0 {
			opts.Progress(rep.Events, total)
		}
		p, err := Project(data)
		if errors.Is(err, ErrUnknownType) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("event %d: %w", rep.Events, err)
		}
		if p.Result == nil || time.Since(p.At) >= store.resultTTL {
			return nil
		}
		want[p.Key] = true
		value := p.Result.Encode()
		got, ok := live[p.Key]
		switch {
		case !ok:
			rep.Missing++
			differ(p.Key, "missing")
		case got.sum != sha256.Sum256(value):
			rep.Different++
			differ(p.Key, "different")
		default:
			return nil
		}
		if opts.DryRun {
			return nil
		}
		if _, err := kv.Put(ctx, p.Key, value); err != nil {
			return fmt.Errorf("write %s %s: %w", kv.Bucket(), p.Key, err)
		}
		rep.Written++
		return nil
	})
	if err != nil {
		return rep, err
	}
	if opts.Progress != nil {
		opts.Progress(rep.Events, rep.Events)
	}
	rep.Results = len(want)

	stale := make([]string, 0)
	for key, e := range live {
		if !want[key] && !e.pending {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		rep.Stale++
		differ(key, "stale")
		if opts.DryRun {
			continue
		}
		if err := kv.Purge(ctx, key); err != nil {
			return rep, fmt.Errorf("remove %s %s: %w", kv.Bucket(), key, err)
		}
		rep.Removed++
	}
	return rep, nil
}

// readLive reads every current value of a bucket (one watch, no per-key reads).
func readLive(ctx context.Context, kv jetstream.KeyValue) (map[string]liveEntry, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kv.Bucket(), err)
	}
	defer w.Stop()
	live := map[string]liveEntry{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read %s: watch closed", kv.Bucket())
			}
			if e == nil { // all current values delivered
				return live, nil
			}
			entry := liveEntry{sum: sha256.Sum256(e.Value())}
			if r, err := DecodeResult(e.Value()); err == nil && !r.Completed() {
				entry.pending = true
			}
			live[e.Key()] = entry
		}
	}
}

// eachEvent calls f with every stored event, oldest first, through an ordered
// consumer; total is the number of events when it started.
func eachEvent(ctx context.Context, js jetstream.JetStream, f func(data []byte, total uint64) error) error {
	cons, err := js.OrderedConsumer(ctx, events.EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubjects}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	total := info.NumPending
	if total == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if err := f(m.Data(), total); err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if md.NumPending == 0 {
			return nil
		}
	}
}
