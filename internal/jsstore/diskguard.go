package jsstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrStorageLow is returned by a guarded Publisher that refused a write
// because the file system under the store is nearly full. Nothing was sent.
// IsUnavailable reports it: the write may succeed once there is room.
var ErrStorageLow = errors.New("storage low")

// DiskGuardConfig configures a DiskGuard.
type DiskGuardConfig struct {
	// Dir is the embedded server's store directory.
	Dir string
	// Reserve is the free space below which new commands are refused.
	// Decisions (claims, events, stored responses, dead letters) are refused
	// only below half of it, so that accepted orders are still decided while
	// new ones are turned away.
	Reserve int64
	// Interval is how often the free space is read (default 100ms). Between
	// two reads the guard subtracts what it let through.
	Interval time.Duration
}

// DiskGuard refuses writes before the file system under an embedded server's
// store fills up. A full file system makes nats-server's writes fail, and a
// write error stops the stream from writing until it is reloaded: keeping a
// reserve free means the store never sees one, and orderly is back on its
// own once there is room again (docs/nats-facts.md, fact 6).
type DiskGuard struct {
	cfg  DiskGuardConfig
	free atomic.Int64 // estimate: the last reading minus what was let through since
	stop chan struct{}
	once sync.Once
	done chan struct{}
}

// NewDiskGuard reads the free space once and starts following it; Stop ends it.
func NewDiskGuard(cfg DiskGuardConfig) (*DiskGuard, error) {
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Dir == "" || cfg.Reserve < 0 || cfg.Interval < 0 {
		return nil, fmt.Errorf("disk guard: a directory, a reserve of at least 0 and a positive interval are required")
	}
	g := &DiskGuard{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	if err := g.read(); err != nil {
		return nil, err
	}
	go g.follow()
	return g, nil
}

func (g *DiskGuard) read() error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(g.cfg.Dir, &st); err != nil {
		return fmt.Errorf("disk guard: free space of %s: %w", g.cfg.Dir, err)
	}
	g.free.Store(int64(st.Bavail) * int64(st.Bsize))
	return nil
}

func (g *DiskGuard) follow() {
	defer close(g.done)
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			_ = g.read() // a failed read keeps the estimate
		}
	}
}

// Stop ends the following.
func (g *DiskGuard) Stop() {
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

// Free is the estimated free space in bytes.
func (g *DiskGuard) Free() int64 { return g.free.Load() }

// Check is nil while new commands are accepted: for readiness.
func (g *DiskGuard) Check(context.Context) error {
	if free := g.Free(); free < g.cfg.Reserve {
		return fmt.Errorf("%w: %d MiB free under %s, below the reserve of %d MiB: new orders are refused",
			ErrStorageLow, free>>20, g.cfg.Dir, g.cfg.Reserve>>20)
	}
	return nil
}

// Level is which writes a guarded Publisher carries.
type Level int

const (
	// NewOrders are refused below the reserve.
	NewOrders Level = iota
	// Decisions are refused below half the reserve.
	Decisions
)

// Publisher returns pub guarded at level: a write is refused with
// ErrStorageLow, without being sent, when the free space is below the
// level's threshold.
func (g *DiskGuard) Publisher(pub Publisher, level Level) Publisher {
	threshold := g.cfg.Reserve
	if level == Decisions {
		threshold /= 2
	}
	return guarded{g: g, pub: pub, threshold: threshold}
}

type guarded struct {
	g         *DiskGuard
	pub       Publisher
	threshold int64
}

// storedOverhead approximates what a message costs the store beyond its
// subject, headers and data (record header, checksum, index).
const storedOverhead = 64

func (p guarded) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if err := p.admit(msg); err != nil {
		return nil, err
	}
	return p.pub.PublishMsg(ctx, msg, opts...)
}

// admit refuses msg when the free space is below the threshold, and else
// counts its size as used.
func (p guarded) admit(msg *nats.Msg) error {
	if free := p.g.Free(); free < p.threshold {
		return fmt.Errorf("%w: %d KiB free, writes of this kind stop below %d KiB", ErrStorageLow, free>>10, p.threshold>>10)
	}
	size := int64(len(msg.Subject) + len(msg.Data) + storedOverhead)
	for k, v := range msg.Header {
		for _, s := range v {
			size += int64(len(k) + len(s) + 4)
		}
	}
	p.g.free.Add(-size)
	return nil
}
