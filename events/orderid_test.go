package events_test

import (
	"math"
	"sort"
	"testing"

	"github.com/orderly-dev/orderly/events"
)

func TestOrderIDRoundTrip(t *testing.T) {
	t.Parallel()
	nonce := "Z4A8K2M9QX7RT"
	var ids []string
	for _, seq := range []uint64{1, 31, 32, 1 << 40, math.MaxUint64 - 1, math.MaxUint64} {
		id := events.OrderID(seq, nonce)
		if len(id) != 30 {
			t.Fatalf("%d: id %q has %d characters", seq, id, len(id))
		}
		got, n, ok := events.ParseOrderID(id)
		if !ok || got != seq || n != nonce {
			t.Fatalf("ParseOrderID(%q) = %d %q %v, want %d", id, got, n, ok, seq)
		}
		ids = append(ids, id)
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatalf("IDs do not sort by sequence: %v", ids)
	}
	for _, bad := range []string{"", "ord_", "ord_00000000001Z4A8K2M9QX7R", "ord_00000000001Z4A8K2M9QX7RTT", "xrd_00000000001Z4A8K2M9QX7RT",
		"ord_0000000000UZ4A8K2M9QX7RT", "ord_0000000000000Z4A8K2M9QX7RT" /* sequence 0 */, "ord_GZZZZZZZZZZZZ4A8K2M9QX7RT0", "ord_00000000001z4a8k2m9qx7rt"} {
		if events.ValidOrderID(bad) {
			t.Errorf("ValidOrderID(%q) = true", bad)
		}
	}
	// A nonce of the right length with what is not Crockford base32: an
	// order ID becomes an event subject, so a wildcard, a separator or a
	// space must not pass (nor lower case, which the IDs never take).
	for _, nonce := range []string{"Z4A8K2M9QX7R.", "Z4A8K2M9QX7R*", "Z4A8K2M9QX7R>", "Z4A8K2M9QX.>T", "Z4A8K2 9QX7RT", "z4a8k2m9qx7rt", "Z4A8K2M9QX7RU", "Z4A8K2M9QX7R\x00"} {
		if events.ValidNonce(nonce) {
			t.Errorf("ValidNonce(%q) = true", nonce)
		}
		if id := "ord_0000000000001" + nonce; events.ValidOrderID(id) {
			t.Errorf("ValidOrderID(%q) = true", id)
		}
	}
}
