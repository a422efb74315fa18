package jsstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// feed is a running ordered consumer that delivers what is stored from its
// start on.
type feed struct {
	mu       sync.Mutex
	failedAt time.Time
	lastErr  error
	lastMsg  time.Time
	// remaking is when the watch began to wait for the consumer, zero while
	// it does not wait (see watch).
	remaking time.Time
	stopped  atomic.Bool
	done     chan struct{}
}

// feedHeartbeat is the feed's idle heartbeat: two missed ones make the
// client recreate the consumer.
const feedHeartbeat = time.Second

// feedQuiet is how long after its last reported error a feed counts as
// recovered: the client reports errors until it has recreated the consumer.
const feedQuiet = 3 * feedHeartbeat

// follow starts a feed; stop ends it, live is nil while it is live.
//
// A feed of what is new starts at the stream's next sequence as read here,
// not with DeliverNewPolicy: nats.go recreates an ordered consumer that has
// delivered nothing yet with its original policy, so a reset before the
// first delivery (a missed heartbeat, a leader change) would skip whatever
// was stored in between.
func follow(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig, h func(jetstream.Msg)) (stop func(), live func() error, err error) {
	if cfg.DeliverPolicy == jetstream.DeliverNewPolicy {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, nil, fmt.Errorf("follow %s: %w", stream, err)
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.CachedInfo().State.LastSeq+1
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("follow %s: %w", stream, err)
	}
	f := &feed{done: make(chan struct{})}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if f.stopped.Load() {
			return
		}
		f.mu.Lock()
		f.lastMsg = time.Now()
		f.mu.Unlock()
		h(m)
	}, jetstream.PullHeartbeat(feedHeartbeat), jetstream.PullExpiry(5*feedHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			f.mu.Lock()
			f.failedAt, f.lastErr = time.Now(), err
			f.mu.Unlock()
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("follow %s: %w", stream, err)
	}
	go f.watch(cons)
	return func() { f.stop(cc, func() { DeleteOrdered(js, stream, cons) }) }, f.err, nil
}

// DeleteOrdered deletes cons, an ordered consumer of stream that its reader
// is done with (its iterator stopped), from the server, which otherwise
// keeps it until nats.go's inactive threshold of 5 minutes has passed. A
// failed delete is left to that threshold.
func DeleteOrdered(js jetstream.JetStream, stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, info.Name)
}

// stop ends the feed at once: h is not called any more, and nats.go's Stop
// runs on its own goroutine. That Stop waits for the consumer's lock, which
// nats.go holds while it makes the consumer again, through each attempt (up
// to 10 s) and the pause after it; with the cluster unable to make it, a
// shutdown waited 21 s here. It ends there once the connection is closed.
// Then, on the same goroutine, then runs (it deletes the consumer, which
// the server would keep for minutes, one more for each time a feed that
// stops when idle starts again).
func (f *feed) stop(cc jetstream.ConsumeContext, then func()) {
	if f.stopped.Swap(true) {
		return
	}
	close(f.done)
	go func() {
		cc.Stop()
		then()
	}()
}

// watch looks, every heartbeat, whether nats.go is making the consumer
// again: CachedInfo waits for the consumer's lock, which the reset holds
// until a new consumer is made. nats.go reports the missed heartbeats that
// start a reset once, and nothing while its attempts fail, so without this a
// feed whose consumer cannot be made (no meta leader) would count as live
// again after feedQuiet.
func (f *feed) watch(cons jetstream.Consumer) {
	tick := time.NewTicker(feedHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-tick.C:
		}
		f.mu.Lock()
		f.remaking = time.Now()
		f.mu.Unlock()
		cons.CachedInfo()
		f.mu.Lock()
		f.remaking = time.Time{}
		f.mu.Unlock()
	}
}

// remakingFor is how long CachedInfo must wait before the feed counts as
// being made again: far longer than the moment a delivery holds the lock,
// and short enough that it takes over from feedQuiet without a gap (the
// watch's call begins at most a heartbeat after the reset).
const remakingFor = 2 * feedHeartbeat

// err is nil while the feed is live: no error reported in the last few
// heartbeats, or messages delivered since the last one, and the consumer not
// being made again for longer than remakingFor.
func (f *feed) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.remaking.IsZero() && time.Since(f.remaking) > remakingFor {
		return fmt.Errorf("feed interrupted: its consumer is being made again since %s (last error: %v)", f.remaking.UTC().Format(time.RFC3339), f.lastErr)
	}
	if f.lastErr == nil || f.lastMsg.After(f.failedAt) || time.Since(f.failedAt) > feedQuiet {
		return nil
	}
	return fmt.Errorf("feed interrupted at %s: %w", f.failedAt.UTC().Format(time.RFC3339), f.lastErr)
}
