package jsstore_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// TestAccountStoragePerTier: an account whose limits are tiered has none of
// its own; the tier with the least room left is the one looked at.
func TestAccountStoragePerTier(t *testing.T) {
	t.Parallel()
	tier := func(used uint64, limit int64) jetstream.Tier {
		return jetstream.Tier{Store: used, Limits: jetstream.AccountLimits{MaxStore: limit}}
	}
	for _, tc := range []struct {
		name string
		info jetstream.AccountInfo
		want jsstore.Storage
	}{
		{"the account's own limit", jetstream.AccountInfo{Tier: tier(5, 100), Tiers: map[string]jetstream.Tier{"R1": tier(1, 2)}}, jsstore.Storage{Used: 5, Limit: 100}},
		{"no limit anywhere", jetstream.AccountInfo{Tier: tier(7, -1), Tiers: map[string]jetstream.Tier{"R1": tier(7, -1)}}, jsstore.Storage{Used: 7, Limit: -1}},
		{"one tier with a limit", jetstream.AccountInfo{Tier: tier(9, 0), Tiers: map[string]jetstream.Tier{"R1": tier(2, -1), "R3": tier(7, 50)}}, jsstore.Storage{Used: 7, Limit: 50, Tier: "R3"}},
		{"the tier with less room", jetstream.AccountInfo{Tier: tier(90, 0), Tiers: map[string]jetstream.Tier{"R1": tier(80, 100), "R3": tier(10, 1000)}}, jsstore.Storage{Used: 80, Limit: 100, Tier: "R1"}},
	} {
		if got := jsstore.AccountStorage(&tc.info); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
