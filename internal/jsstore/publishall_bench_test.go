package jsstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// The processor's batch publish (claims, events) on a real embedded server,
// each publisher one batch at a time, 8 publishers per CPU.
// Run: go test -run '^$' -bench PublishMsgs -benchmem ./internal/jsstore/
func BenchmarkPublishMsgs(b *testing.B) {
	ctx := context.Background()
	plain := js(b)
	if _, err := plain.CreateStream(ctx, jetstream.StreamConfig{Name: "BATCH", Subjects: []string{"batch.>"}}); err != nil {
		b.Fatal(err)
	}
	pub := jsstore.FastPublish(plain, 5*time.Second).(jsstore.BatchPublisher)
	for _, size := range []int{1, 20} {
		b.Run("batch"+strconv.Itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				msgs := make([]*nats.Msg, size)
				for pb.Next() {
					for i := range msgs {
						msgs[i] = &nats.Msg{Subject: "batch.x", Data: []byte("order")}
					}
					for _, r := range pub.PublishMsgs(ctx, msgs) {
						if r.Err != nil {
							b.Error(r.Err)
							return
						}
					}
				}
			})
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
