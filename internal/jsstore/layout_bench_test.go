package jsstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// BenchmarkEventAsClaimLayout measures what ADR 0008 says stands in the way
// of storing the claim in the event: a conditional publish whose subject
// filter names the key ("no event for this key yet") or the order. With
// 100,000 orders stored, a filter whose wildcard comes before the literal
// token and spans every order (key after the order ID: ev.*.*.<key>) is
// compared with one whose wildcards span a handful of subjects (ev.*.<id>.*).
//
// Run: go test -run '^$' -bench EventAsClaimLayout -benchtime 2000x ./internal/jsstore/
func BenchmarkEventAsClaimLayout(b *testing.B) {
	ctx := context.Background()
	js := js(b)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LAYOUT", Subjects: []string{"ev.>"}}); err != nil {
		b.Fatal(err)
	}
	const orders = 100000
	var last jetstream.PubAckFuture
	for i := range orders {
		f, err := js.PublishAsync(fmt.Sprintf("ev.c.id%08d.key%08d", i, i), []byte("x"))
		if err != nil {
			b.Fatal(err)
		}
		last = f
	}
	select {
	case <-last.Ok():
	case err := <-last.Err():
		b.Fatal(err)
	}
	next := orders // every run's orders are new
	for _, tc := range []struct{ name, filter string }{
		{"wildcard before the key, across all orders", "ev.*.*.key%08d"},
		{"wildcards around the order ID", "ev.*.id%08d.*"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				n := next
				next++
				m := &nats.Msg{Subject: fmt.Sprintf("ev.c.id%08d.key%08d", n, n), Data: []byte("x")}
				jsstore.SetExpectLastSubjectSeq(m, 0, fmt.Sprintf(tc.filter, n))
				if _, err := js.PublishMsg(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
