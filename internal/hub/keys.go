package hub

import (
	"math"
	"sync"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// seenKeys remembers, with Bloom filters, the keys that had a record in
// ORDER_RESULTS within the result TTL. MayHave never answers false for a key
// it was told about less than the TTL ago; it answers true for under 2% of
// the keys it never saw (a false positive costs the caller one read, as if
// there were no filter).
//
// Keys expire from the bucket a TTL after their last write, so the filters are
// sliced by time: a key goes into the slice of the time it was written, and a
// slice is dropped once the newest key it can hold is older than the TTL.
// Each slice is a scalable Bloom filter: when its last filter is full, the
// next one holds twice as many keys at half the false-positive rate, so that
// a slice of any size stays under 2% (memory about 2 bytes per key). The
// filters of all slices together take at most budget bytes; past that the
// set stops remembering and says so (full), and the caller reads every key.
//
// Expired slices are dropped as keys are added (the result watch adds about
// two a new order), not on the request path: a slice kept a little longer
// only makes MayHave answer true more often.
type seenKeys struct {
	mu        sync.RWMutex
	ttl       time.Duration
	width     time.Duration
	perFilter uint // keys of a slice's first filter
	budget    uint // bits of all filters, at most
	slices    map[int64][]*slot
	bits      uint // bits of all filters held
	full      bool // a key could not be remembered: MayHave is true for all
	fullAt    time.Time
}

type slot struct {
	f   *bloom.BloomFilter
	n   uint // keys added
	cap uint // keys it holds at its false-positive rate
}

const (
	// seenSlices is how many slices cover one TTL.
	seenSlices = 8
	// firstFilterKeys is how many keys a slice's first filter holds.
	firstFilterKeys = 1 << 14
	// seenFalsePositive is the false-positive rate of a slice's first filter.
	seenFalsePositive = 0.01
	// seenHashes is the number of hash functions of every filter, so that a
	// key's hashes are computed once for all of them.
	seenHashes = 7
)

// newSeenKeys returns a set for keys that live ttl, in at most budget bytes.
func newSeenKeys(ttl time.Duration, budget uint) *seenKeys {
	return newSeenKeysSized(ttl, firstFilterKeys, budget)
}

func newSeenKeysSized(ttl time.Duration, perFilter, budget uint) *seenKeys {
	return &seenKeys{ttl: ttl, width: max(ttl/seenSlices, time.Second), perFilter: perFilter, budget: 8 * budget,
		slices: make(map[int64][]*slot)}
}

// filterBits is the size of a filter of seenHashes hashes that holds n keys
// at the false-positive rate p: m = -k n / ln(1 - p^(1/k)).
func filterBits(n uint, p float64) uint {
	return uint(math.Ceil(-seenHashes * float64(n) / math.Log(1-math.Pow(p, 1.0/seenHashes))))
}

// Add remembers that key had a record written at.
func (s *seenKeys) Add(key string, at time.Time) {
	i := at.UnixNano() / int64(s.width)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(at)
	slots := s.slices[i]
	if len(slots) == 0 || slots[len(slots)-1].n >= slots[len(slots)-1].cap {
		j := len(slots)
		n := s.perFilter << min(j, 20)
		m := filterBits(n, seenFalsePositive*math.Pow(0.5, float64(j)))
		if s.bits+m > s.budget {
			// Forgotten: until this key has expired, nothing is known new.
			s.full = true
			if at.After(s.fullAt) {
				s.fullAt = at
			}
			return
		}
		slots = append(slots, &slot{f: bloom.New(m, seenHashes), cap: n})
		s.slices[i] = slots
		s.bits += m
	}
	last := slots[len(slots)-1]
	last.f.AddString(key)
	last.n++
}

// MayHave is false only when key certainly had no record written within the
// TTL (and the slack of expire) before now.
func (s *seenKeys) MayHave(key string) bool {
	locs := bloom.Locations([]byte(key), seenHashes)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.full {
		return true
	}
	for _, slots := range s.slices {
		for _, sl := range slots {
			if sl.f.TestLocations(locs) {
				return true
			}
		}
	}
	return false
}

// expire drops the slices whose keys have all expired: the slice ends at
// (i+1)*width, and a key written then lives until a TTL later. A slice is
// kept one width longer than that, for clocks that differ a little.
func (s *seenKeys) expire(now time.Time) {
	for i, slots := range s.slices {
		end := time.Unix(0, (i+1)*int64(s.width))
		if now.Sub(end) > s.ttl+s.width {
			delete(s.slices, i)
			for _, sl := range slots {
				s.bits -= sl.f.Cap()
			}
		}
	}
	// Forgetting stopped at fullAt: keys written after it are unknown until
	// they expire, a TTL later.
	if s.full && now.Sub(s.fullAt) > s.ttl+s.width {
		s.full = false
	}
}

// filters is the number of filters held, and their size in bytes.
func (s *seenKeys) filters() (n int, bytes uint) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, slots := range s.slices {
		n += len(slots)
	}
	return n, s.bits / 8
}
