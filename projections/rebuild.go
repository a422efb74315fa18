package projections

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/orderly-dev/orderly/idempotency"
)

// RebuildTarget is the read model a rebuild compares and repairs.
type RebuildTarget interface {
	// Snapshot calls f with every current record, once per key.
	Snapshot(ctx context.Context, f func(key string, value []byte)) error
	// Save stores a record; Purge removes a key.
	Save(ctx context.Context, key string, rec idempotency.Record) error
	Purge(ctx context.Context, key string) error
}

// EventReader reads every stored event, oldest first; total is the number of
// events when it started.
type EventReader interface {
	Each(ctx context.Context, f func(data []byte, total uint64) error) error
}

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
	// Keyed counts the events of keyed orders within the result TTL: their
	// answers are the events themselves (ADR 0010), nothing to rebuild.
	Keyed int `json:"keyed"`
	// Missing, Different and Stale count records absent from the live read
	// models, present with other bytes, or present without an event that calls
	// for them. Pending claims are not stale: claims are not events.
	Missing   int `json:"missing"`
	Different int `json:"different"`
	Stale     int `json:"stale"`
	// Unreadable counts the events that cannot be projected (undecodable, or
	// without a valid key hash): skipped, as the projector skips them, and
	// listed with the differences.
	Unreadable int `json:"unreadable"`
	// Written and Removed count the changes (0 in a dry run).
	Written int `json:"written"`
	Removed int `json:"removed"`
	// Differences lists the first differences, for humans.
	Differences []string `json:"differences,omitempty"`
}

// Equal reports whether the live read models equal the rebuilt ones.
func (r RebuildReport) Equal() bool { return r.Missing+r.Different+r.Stale == 0 }

// earlierForm is the digest of rec as versions before ADR 0009 stored it,
// without the decision time: the same answer, left as it is.
func earlierForm(rec idempotency.Record) [sha256.Size]byte {
	rec.DecidedUnixNano = 0
	return sha256.Sum256(rec.Encode())
}

// Rebuild recomputes ORDER_RESULTS from ORDER_EVENTS with Project, the
// projector's own function (keyed orders excepted: their events are their
// answers, and a record of one is stale), so a rebuilt record has exactly the bytes the
// projector writes. It compares every record with the live one, writes what is
// missing or different, and removes what no event calls for (never a pending
// claim, which belongs to a command still in flight). It is safe to run while
// orderly runs: the projector writes the same bytes. Results older than the
// result TTL are not rebuilt: their keys are free.
func Rebuild(ctx context.Context, results RebuildTarget, log EventReader, ttl time.Duration, opts RebuildOptions) (RebuildReport, error) {
	var rep RebuildReport
	type digest struct {
		sum     [sha256.Size]byte
		pending bool
	}
	live := map[string]digest{}
	err := results.Snapshot(ctx, func(key string, value []byte) {
		d := digest{sum: sha256.Sum256(value)}
		if rec, err := idempotency.Decode(value); err == nil && !rec.Completed() {
			d.pending = true
		}
		live[key] = d
	})
	if err != nil {
		return rep, err
	}
	want := make(map[string]bool, len(live))
	list := func(format string, a ...any) {
		if len(rep.Differences) < opts.MaxDifferences {
			rep.Differences = append(rep.Differences, fmt.Sprintf(format, a...))
		}
	}
	differ := func(key, what string) { list("result %s: %s", key, what) }
	err = log.Each(ctx, func(data []byte, total uint64) error {
		rep.Events++
		if opts.Progress != nil && rep.Events%1000 == 0 {
			opts.Progress(rep.Events, total)
		}
		p, err := Project(data)
		if errors.Is(err, ErrUnknownType) {
			return nil
		}
		if err != nil {
			rep.Unreadable++
			list("event %d: skipped: %v", rep.Events, err)
			return nil
		}
		if p.Record == nil || time.Since(p.At) >= ttl {
			return nil
		}
		if p.KeyedAnswer() {
			rep.Keyed++
			return nil
		}
		want[p.Key] = true
		value := p.Record.Encode()
		got, ok := live[p.Key]
		switch {
		case !ok:
			rep.Missing++
			differ(p.Key, "missing")
		case got.sum != sha256.Sum256(value) && got.sum != earlierForm(*p.Record):
			rep.Different++
			differ(p.Key, "different")
		default:
			return nil
		}
		if opts.DryRun {
			return nil
		}
		if err := results.Save(ctx, p.Key, *p.Record); err != nil {
			return fmt.Errorf("write %s: %w", p.Key, err)
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
		if err := results.Purge(ctx, key); err != nil {
			return rep, fmt.Errorf("remove %s: %w", key, err)
		}
		rep.Removed++
	}
	return rep, nil
}
