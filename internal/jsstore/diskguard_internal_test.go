package jsstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// countingPublisher stands in for the connection under a guard: it counts
// the writes the guard let through (the guard's logic is pure; what a full
// disk does to the store is TestFullDiskLosesNoAcceptedOrder's).
type countingPublisher struct{ n atomic.Int32 }

func (p *countingPublisher) PublishMsg(context.Context, *nats.Msg, ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.n.Add(1)
	return &jetstream.PubAck{}, nil
}

// guardWith starts a guard with a reserve of 1 MiB whose free space is set
// to free, as if read so (its next reading is an hour away).
func guardWith(t *testing.T, free int64) *DiskGuard {
	t.Helper()
	g, err := NewDiskGuard(DiskGuardConfig{Dir: t.TempDir(), Reserve: 1 << 20, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	g.free.Store(free)
	return g
}

// TestDiskGuardStillDecidesBelowTheReserve: below the reserve new orders
// are refused, unsent, while decisions go on down to half of it, so that
// orders already accepted are decided while new ones are turned away.
func TestDiskGuardStillDecidesBelowTheReserve(t *testing.T) {
	t.Parallel()
	g := guardWith(t, 3<<18) // 0.75 MiB: below the reserve, above its half
	var orders, decisions countingPublisher
	msg := &nats.Msg{Subject: "orders.commands", Data: []byte(`{}`)}
	if _, err := g.Publisher(&orders, NewOrders).PublishMsg(context.Background(), msg); !errors.Is(err, ErrStorageLow) || orders.n.Load() != 0 {
		t.Fatalf("a new order below the reserve: %v, %d sent", err, orders.n.Load())
	}
	if _, err := g.Publisher(&decisions, Decisions).PublishMsg(context.Background(), msg); err != nil || decisions.n.Load() != 1 {
		t.Fatalf("a decision above half the reserve: %v, %d sent", err, decisions.n.Load())
	}
	if err := g.Check(context.Background()); !errors.Is(err, ErrStorageLow) || !IsUnavailable(err) {
		t.Fatalf("readiness below the reserve: %v", err)
	}
	g.free.Store(1<<18 - 1) // below half the reserve: decisions stop too
	if _, err := g.Publisher(&decisions, Decisions).PublishMsg(context.Background(), msg); !errors.Is(err, ErrStorageLow) || decisions.n.Load() != 1 {
		t.Fatalf("a decision below half the reserve: %v, %d sent", err, decisions.n.Load())
	}
}

// TestDiskGuardCountsWhatItLetsThrough: between two readings of the free
// space, the guard subtracts each write it lets through, so that a burst
// faster than the readings stops at the reserve instead of filling the disk.
func TestDiskGuardCountsWhatItLetsThrough(t *testing.T) {
	t.Parallel()
	const room = 10_000 // bytes above the reserve
	g := guardWith(t, 1<<20+room)
	var pub countingPublisher
	guarded := g.Publisher(&pub, NewOrders)
	msg := &nats.Msg{Subject: "orders.commands", Data: []byte(strings.Repeat("x", 1000)), Header: nats.Header{"Nats-Msg-Id": []string{"k"}}}
	var err error
	for range 100 {
		if _, err = guarded.PublishMsg(context.Background(), msg); err != nil {
			break
		}
	}
	// Each write counts its subject, header and data and the store's
	// overhead, 1,095 bytes here. A write is let through while the estimate
	// is not below the reserve (it is checked, then counted): ten, the last
	// one taking 950 bytes of the reserve, which is there for that.
	if n := pub.n.Load(); !errors.Is(err, ErrStorageLow) || n != 10 {
		t.Fatalf("%d writes of 1,000 bytes let through into %d bytes of room (last error %v)", n, room, err)
	}
	if used := 1<<20 + room - g.Free(); used != 10*(int64(len(msg.Subject))+1000+storedOverhead+int64(len("Nats-Msg-Id")+len("k")+4)) {
		t.Fatalf("%d bytes counted as used for 10 writes", used)
	}
}
