package ops

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// IdleRelease returns the heap's free memory to the operating system once
// the process goes quiet after a burst of work. Without it the Go runtime
// keeps what a burst grew the heap to (its goal is twice the live heap, and
// no collection runs while nothing is allocated) and gives it back over
// minutes; an orderly serve that took a million orders held three to four
// times its live heap for two minutes after the last one.
type IdleRelease struct {
	// Every is how often the allocation rate is looked at.
	Every time.Duration
	// Burst is how much must have been allocated since the last release
	// for a release to be worth a collection.
	Burst uint64
	// Quiet is the most a quiet interval allocates.
	Quiet uint64
	// Again releases once more this long after a release, when expiring
	// state (a duplicate window) frees memory without any allocation.
	Again time.Duration
}

// DefaultIdleRelease looks every 5 s: a release follows 256 MiB of
// allocations once an interval allocates less than 8 MiB.
var DefaultIdleRelease = IdleRelease{Every: 5 * time.Second, Burst: 256 << 20, Quiet: 8 << 20}

// WithWindow is r, releasing once more when entries kept for window after
// the burst (an embedded server's duplicate window) have expired.
func (c IdleRelease) WithWindow(window time.Duration) IdleRelease {
	c.Again = window + c.Every
	return c
}

// releaser decides, from the cumulative bytes allocated at each look,
// when to release; pure, for tests.
type releaser struct {
	cfg         IdleRelease
	last, since uint64
	again       time.Time // a second release is due then (zero: none)
	started     bool
}

// look takes the cumulative allocated bytes at now and says whether to
// release.
func (r *releaser) look(allocs uint64, now time.Time) bool {
	if !r.started {
		r.last, r.started = allocs, true
		return false
	}
	delta := allocs - r.last
	r.last = allocs
	r.since += delta
	if delta >= r.cfg.Quiet {
		return false
	}
	if r.since >= r.cfg.Burst {
		r.since = 0
		if r.cfg.Again > 0 {
			r.again = now.Add(r.cfg.Again)
		}
		return true
	}
	if !r.again.IsZero() && !now.Before(r.again) {
		r.again = time.Time{}
		return true
	}
	return false
}

// Run releases as IdleRelease says until ctx ends.
func (c IdleRelease) Run(ctx context.Context, logger *slog.Logger) {
	r := &releaser{cfg: c}
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	t := time.NewTicker(c.Every)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if r.look(sample[0].Value.Uint64(), time.Now()) {
			before := sample[1].Value.Uint64()
			start := time.Now()
			debug.FreeOSMemory()
			metrics.Read(sample)
			logger.Debug("quiet after a burst: free heap memory returned to the operating system",
				"returned_bytes", int64(sample[1].Value.Uint64())-int64(before), "took", time.Since(start).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
