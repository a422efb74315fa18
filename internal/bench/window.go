package bench

import (
	"math"
	"sync/atomic"
	"time"
)

// window counts the latencies of a load in buckets that the requests add to
// without a lock, so that the progress line can show the p99 of the
// requests since its last line: a run whose tail grows halfway (a backlog
// decided beside the load, a garbage collection of a grown heap) shows when,
// where the run's one p99 at the end would only say that it did.
type window struct {
	counts [windowBuckets]atomic.Int64
	seen   [windowBuckets]int64 // the counts at the last look (the looker's own)
}

// Buckets are bucketsPerDoubling per doubling of the latency in µs (each
// about 4.4% wide), from 1 µs up to 2^24 µs (16.8 s, where the last one
// takes everything slower).
const (
	bucketsPerDoubling = 16
	windowBuckets      = 24*bucketsPerDoubling + 1
)

func bucketOf(d time.Duration) int {
	us := d.Microseconds()
	if us <= 1 {
		return 0
	}
	return min(int(math.Log2(float64(us))*bucketsPerDoubling), windowBuckets-1)
}

// upper is the largest latency bucket i holds.
func upper(i int) time.Duration {
	return time.Duration(math.Exp2(float64(i+1)/bucketsPerDoubling) * float64(time.Microsecond))
}

// add counts one request's latency; safe from any goroutine.
func (w *window) add(d time.Duration) { w.counts[bucketOf(d)].Add(1) }

// next returns the q-quantile of the latencies added since the last call
// (rounded up to its bucket's bound, so at most 4.4% high) and how many there
// were; 0 and 0 when there were none. One goroutine calls it.
func (w *window) next(q float64) (time.Duration, int64) {
	var fresh [windowBuckets]int64
	var n int64
	for i := range w.counts {
		c := w.counts[i].Load()
		fresh[i], w.seen[i] = c-w.seen[i], c
		n += fresh[i]
	}
	if n == 0 {
		return 0, 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var sum int64
	for i, c := range fresh {
		if sum += c; sum >= rank {
			return upper(i), n
		}
	}
	return upper(windowBuckets - 1), n
}
