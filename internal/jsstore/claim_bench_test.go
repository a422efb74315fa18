package jsstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// The claim path, measured on a real embedded server (fsync every second).
// Run: go test -run '^$' -bench Claim -benchtime 20000x ./internal/jsstore/
//
// KVCreate is the claim orderly uses: an atomic create of the key's slot in
// ORDER_RESULTS. ExpectedSeqPublish is the alternative of the design: a publish
// to a per-key subject with an expected last subject sequence of 0. Lost is a
// claim that finds the key taken (a duplicate), which costs the read of the
// holder on top.

func benchClaims(b *testing.B, parallel bool, claim func(ctx context.Context, i int64) error) {
	b.ReportAllocs()
	var n atomic.Int64
	ctx := context.Background()
	run := func() error { return claim(ctx, n.Add(1)) }
	b.ResetTimer()
	if !parallel {
		for i := 0; i < b.N; i++ {
			if err := run(); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := run(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkClaim(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel32"
		}
		b.Run("KVCreate/"+name, func(b *testing.B) {
			js := orderlytest.JetStream(b, natsserver.Fsync{Interval: time.Second})
			store, err := jsstore.OpenResults(context.Background(), js, js)
			if err != nil {
				b.Fatal(err)
			}
			claim := idempotency.Record{State: idempotency.StatePending, OrderID: "ord_01M8MDT443JPW9458J298TZP0M", Fingerprint: "tWWW18ir72jeRO_7FM_v-rwh95XGLoZUDlpR3W-KjnQ"}
			benchClaims(b, parallel, func(ctx context.Context, i int64) error {
				_, won, err := store.Claim(ctx, "k"+strconv.FormatInt(i, 36), claim)
				if err == nil && !won {
					b.Fatal("lost a fresh key")
				}
				return err
			})
		})
		b.Run("KVCreateLost/"+name, func(b *testing.B) {
			js := orderlytest.JetStream(b, natsserver.Fsync{Interval: time.Second})
			store, err := jsstore.OpenResults(context.Background(), js, js)
			if err != nil {
				b.Fatal(err)
			}
			claim := idempotency.Record{State: idempotency.StatePending, OrderID: "ord_01M8MDT443JPW9458J298TZP0M", Fingerprint: "fp"}
			if _, _, err := store.Claim(context.Background(), "taken", claim); err != nil {
				b.Fatal(err)
			}
			benchClaims(b, parallel, func(ctx context.Context, i int64) error {
				_, won, err := store.Claim(ctx, "taken", claim)
				if err == nil && won {
					b.Fatal("won a taken key")
				}
				return err
			})
		})
		b.Run("ExpectedSeqPublish/"+name, func(b *testing.B) {
			js := orderlytest.JetStream(b, natsserver.Fsync{Interval: time.Second})
			if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "CLAIMS", Subjects: []string{"claims.>"}, Storage: jetstream.FileStorage}); err != nil {
				b.Fatal(err)
			}
			data := idempotency.Record{State: idempotency.StatePending, OrderID: "ord_01M8MDT443JPW9458J298TZP0M", Fingerprint: "fp"}.Encode()
			benchClaims(b, parallel, func(ctx context.Context, i int64) error {
				_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "claims." + strconv.FormatInt(i, 36), Data: data},
					jetstream.WithExpectLastSequencePerSubject(0))
				return err
			})
		})
	}
}
