package server

import (
	"context"
	"fmt"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// accountStoreHeadroom is how close to the account's JetStream storage
// limit a process stops saying it is ready: some 400 orders before the
// writes are refused on one server (a command and its event, ~2.6 KB), some
// 130 on an R3 cluster, where the limit counts each of the three copies.
const accountStoreHeadroom = 1 << 20

// accountStoreFull says why orderly's NATS account can take no more writes,
// or nil: the account has a JetStream storage limit (the max_file of its
// jetstream block, `orderly credentials init --account-max-store`) and less
// than accountStoreHeadroom is left below it. At the limit every write of the
// account is refused ("resource limits exceeded for account", 10002): new
// orders are answered 503, and the processor holds what it accepted until
// the limit is raised or the retentions free room. An account whose limits
// are tiered (per replica count: R1, R3; accounts of a JWT, as hosted NATS
// makes them) has none of its own, but one per tier, each counting the
// streams of its replica count: any tier at its limit is one.
func accountStoreFull(info *jetstream.AccountInfo) error {
	f := jsstore.AccountStorage(info)
	if f.Limit <= 0 || int64(f.Used)+accountStoreHeadroom < f.Limit {
		return nil
	}
	if f.Tier != "" {
		return fmt.Errorf("the NATS account's JetStream storage for its %s streams (tier %s) is at its limit: %s of %s (raise the account's limit for the tier, or shorten the retentions; docs/operations.md)",
			f.Tier, f.Tier, humanize.IBytes(f.Used), humanize.IBytes(uint64(f.Limit)))
	}
	return fmt.Errorf("the NATS account's JetStream storage is at its limit: %s of %s (raise it with orderly credentials init --account-max-store and reload the NATS nodes, or shorten the retentions; docs/operations.md)",
		humanize.IBytes(f.Used), humanize.IBytes(uint64(f.Limit)))
}

// jetStreamReady is the readiness check "jetstream": JetStream answers for
// the account, and the account has room for writes.
func jetStreamReady(js jetstream.JetStream) func(context.Context) error {
	return func(ctx context.Context) error {
		info, err := js.AccountInfo(ctx)
		if err != nil {
			return err
		}
		return accountStoreFull(info)
	}
}

// accountStore exports, at each scrape, the JetStream storage orderly's
// account uses (every copy of a replicated stream counted, as the account's
// limit counts them) and its limit when it has one. The alert
// OrderlyAccountStorageNearLimit reads them. Nothing when the account's
// information does not come within the timeout.
type accountStore struct {
	js          jetstream.JetStream
	timeout     time.Duration
	used, limit *prometheus.Desc
}

func newAccountStore(js jetstream.JetStream) *accountStore {
	return &accountStore{js: js, timeout: 2 * time.Second,
		used: prometheus.NewDesc("orderly_account_store_bytes",
			"JetStream storage orderly's NATS account uses, every copy of a replicated stream counted; with limits per tier (replica count), that of the tier with the least room left.", nil, nil),
		limit: prometheus.NewDesc("orderly_account_store_limit_bytes",
			"The account's JetStream storage limit (credentials init --account-max-store), or that tier's; absent when it has none.", nil, nil)}
}

func (a *accountStore) Describe(ch chan<- *prometheus.Desc) {
	ch <- a.used
	ch <- a.limit
}

func (a *accountStore) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	info, err := a.js.AccountInfo(ctx)
	if err != nil {
		return
	}
	f := jsstore.AccountStorage(info)
	ch <- prometheus.MustNewConstMetric(a.used, prometheus.GaugeValue, float64(f.Used))
	if f.Limit > 0 {
		ch <- prometheus.MustNewConstMetric(a.limit, prometheus.GaugeValue, float64(f.Limit))
	}
}
