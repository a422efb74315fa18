package server

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAccountStoreFull: readiness fails from accountStoreHeadroom below the
// account's storage limit, and never for an account without one.
func TestAccountStoreFull(t *testing.T) {
	t.Parallel()
	const limit = 100 << 20
	for _, tc := range []struct {
		used  uint64
		limit int64
		full  bool
	}{
		{used: 0, limit: -1},
		{used: 1 << 40, limit: -1}, // no limit, however much is used
		{used: 1 << 40, limit: 0},
		{used: 10 << 20, limit: limit},
		{used: limit - accountStoreHeadroom - 1, limit: limit},
		{used: limit - accountStoreHeadroom, limit: limit, full: true},
		{used: limit + 5<<20, limit: limit, full: true}, // a cluster goes a little past it
	} {
		info := &jetstream.AccountInfo{Tier: jetstream.Tier{Store: tc.used, Limits: jetstream.AccountLimits{MaxStore: tc.limit}}}
		err := accountStoreFull(info)
		if (err != nil) != tc.full {
			t.Errorf("%d bytes used of %d: %v, want full %v", tc.used, tc.limit, err, tc.full)
		}
		if err != nil && !strings.Contains(err.Error(), "at its limit") {
			t.Errorf("%d bytes used of %d: %v does not say the limit is reached", tc.used, tc.limit, err)
		}
	}
}
