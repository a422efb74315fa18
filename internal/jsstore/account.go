package jsstore

import (
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Storage is the JetStream storage an account uses against its limit: the
// account's own, or a tier's (Tier names it).
type Storage struct {
	Used  uint64 // bytes, every copy of a replicated stream counted
	Limit int64  // bytes; 0 or less: none
	Tier  string // "R1", "R3": the limit is this tier's; empty: the account's
}

// AccountStorage is the account's storage against its limit (ADR 0032).
// An account whose limits are tiered (per replica count: accounts made as
// JWTs, hosted NATS's among them) has no limit of its own (nats-facts 28):
// then it is that of the tier with the least room left below its limit,
// and the account's total, without a limit, when no tier has one.
func AccountStorage(info *jetstream.AccountInfo) Storage {
	s := Storage{Used: info.Store, Limit: info.Limits.MaxStore}
	if s.Limit > 0 {
		return s
	}
	for _, name := range slices.Sorted(maps.Keys(info.Tiers)) {
		t := info.Tiers[name]
		if t.Limits.MaxStore <= 0 {
			continue
		}
		if s.Limit <= 0 || t.Limits.MaxStore-int64(t.Store) < s.Limit-int64(s.Used) {
			s = Storage{Used: t.Store, Limit: t.Limits.MaxStore, Tier: name}
		}
	}
	return s
}
