package main

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAccountStorageLine: orderly status says the account's storage against
// its limit, or against the limit of the tier with the least room left when
// its limits are tiered (it said "no limit" for such an account).
func TestAccountStorageLine(t *testing.T) {
	t.Parallel()
	tier := func(used uint64, limit int64) jetstream.Tier {
		return jetstream.Tier{Store: used, Limits: jetstream.AccountLimits{MaxStore: limit}}
	}
	for _, tc := range []struct {
		info jetstream.AccountInfo
		want string
	}{
		{jetstream.AccountInfo{Tier: tier(3<<20, -1)},
			"account storage: 3.0 MiB in JetStream, every copy counted, no limit (orderly credentials init --account-max-store sets one)\n"},
		{jetstream.AccountInfo{Tier: tier(3<<20, 12<<20)},
			"account storage: 3.0 MiB in JetStream, every copy counted, of a limit of 12 MiB (25%; at it new orders are refused)\n"},
		{jetstream.AccountInfo{Tier: tier(4<<20, 0), Tiers: map[string]jetstream.Tier{"R1": tier(1<<20, -1), "R3": tier(3<<20, 4<<20)}},
			"account storage: 4.0 MiB in JetStream, every copy counted, of which its R3 streams (tier R3) 3.0 MiB of the tier's limit of 4.0 MiB (75%; at it new orders are refused)\n"},
	} {
		if got := accountStorageLine(&tc.info); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}
