package jsstore

import (
	"context"
	"fmt"
	"sync"
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
	f := &feed{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
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
	return cc.Stop, f.err, nil
}

// err is nil while the feed is live: no error reported in the last few
// heartbeats, or messages delivered since the last one.
func (f *feed) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastErr == nil || f.lastMsg.After(f.failedAt) || time.Since(f.failedAt) > feedQuiet {
		return nil
	}
	return fmt.Errorf("feed interrupted at %s: %w", f.failedAt.UTC().Format(time.RFC3339), f.lastErr)
}
