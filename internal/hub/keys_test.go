package hub

import (
	"fmt"
	"testing"
	"time"
)

// TestSeenKeysRemembersForTheTTL: a key is "may have" from its write until
// it has expired from the bucket (a TTL later), and not after that with the
// slack of one slice. (Expired slices go as later keys are added.)
func TestSeenKeysRemembersForTheTTL(t *testing.T) {
	t.Parallel()
	ttl := 8 * time.Hour
	s := newSeenKeys(ttl, 1<<20)
	t0 := time.Date(2026, 11, 30, 10, 17, 0, 0, time.UTC)
	s.Add("k", t0)
	for _, d := range []time.Duration{0, time.Minute, ttl / 2, ttl - time.Second, ttl} {
		s.Add("later", t0.Add(d))
		if !s.MayHave("k") {
			t.Fatalf("forgotten %s after its write, within the TTL of %s", d, ttl)
		}
	}
	end := t0.Add(3*ttl + 3*s.width) // "later" too has expired by then
	s.Add("last", end)
	if s.MayHave("k") {
		t.Fatal("remembered after the TTL and the slack")
	}
	if n, _ := s.filters(); n != 1 {
		t.Fatalf("%d filters left after every key but the last expired, want 1", n)
	}
}

// TestSeenKeysFalsePositives: of keys never added, under 2% look seen, also
// after a slice grew to many filters; none of the added keys is ever missed.
func TestSeenKeysFalsePositives(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := newSeenKeysSized(time.Hour, 100, 1<<20)
	for i := range 50000 {
		s.Add(fmt.Sprintf("added-%d", i), now)
	}
	n, bytes := s.filters()
	if n != 9 { // 100, 200, ... 25,600: 51,100 keys
		t.Fatalf("%d filters for 50,000 keys from 100 doubling, want 9", n)
	}
	t.Logf("50,000 keys: %d filters, %d bytes (%.1f bytes a key)", n, bytes, float64(bytes)/50000)
	for i := range 50000 {
		if !s.MayHave(fmt.Sprintf("added-%d", i)) {
			t.Fatalf("added-%d missed", i)
		}
	}
	fp := 0
	for i := range 10000 {
		if s.MayHave(fmt.Sprintf("other-%d", i)) {
			fp++
		}
	}
	// 1% + 0.5% + 0.25% ... < 2%, with room for chance.
	if fp > 250 {
		t.Fatalf("%d of 10,000 unknown keys look seen", fp)
	}
	t.Logf("%d of 10,000 unknown keys look seen", fp)
}

// TestSeenKeysFullKnowsNothingNew: past its memory bound it stops telling
// keys new until the keys it could not remember have expired.
func TestSeenKeysFullKnowsNothingNew(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := newSeenKeysSized(time.Hour, 10, uint(filterBits(10, seenFalsePositive)+filterBits(20, seenFalsePositive/2))/8+1)
	for i := range 31 { // the 31st does not fit in the filters of 10 and 20 keys
		s.Add(fmt.Sprintf("k-%d", i), t0)
	}
	if !s.MayHave("never-added") {
		t.Fatal("a key is called new although the filter could not remember every key")
	}
	s.Add("after", t0.Add(time.Hour+3*s.width))
	if s.MayHave("never-added") {
		t.Fatal("still full after every key expired")
	}
}
