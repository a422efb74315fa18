package jsstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// BenchmarkAppendAll: a processor's batch of 64 events stored with one
// wait, as orderly stores them, without and with the header that says
// which commands were handled (events.HeaderDecidedBelow; ADR 0031); per
// event.
//
// Run: go test -run '^$' -bench AppendAll -benchmem -count 6 ./internal/jsstore/
func BenchmarkAppendAll(b *testing.B) {
	const batch = 64
	data := []byte(`{"specversion":"1.0","type":"orderly.order.created","source":"orderly","data":{"customer_id":"c-42","currency":"EUR","total":6439}}`)
	for _, said := range []bool{false, true} {
		name := map[bool]string{false: "without", true: "with the handled-below header"}[said]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			j := js(b)
			e, err := jsstore.OpenEvents(ctx, j, jsstore.FastPublish(j, 5*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			if said {
				e.SetDecidedBelow(123_456_789)
			}
			reqs := make([]jsstore.AppendRequest, batch)
			n := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				for i := range reqs {
					n++
					reqs[i] = jsstore.AppendRequest{Kind: events.KindCreated, OrderID: events.OrderID(n, events.NewNonce()), Data: data}
				}
				for _, o := range e.AppendAll(ctx, reqs) {
					if o.Err != nil || !o.Stored {
						b.Fatal(o.Stored, o.Err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
		})
	}
}
