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
	js     jetstream.JetStream
	stream string
	cfg    jetstream.OrderedConsumerConfig // with its start sequence (see follow)
	h      func(jetstream.Msg)

	// deliver is held while h runs and while the consumer is replaced, so
	// that h is called from one goroutine at a time, in order, and never
	// with a message of a replaced consumer.
	deliver sync.Mutex
	// gen counts the consumers (see replace); a message or an error of an
	// earlier one is dropped.
	gen atomic.Uint64
	// last is the last message h was called with (under deliver): a
	// replacement starts after its stream sequence.
	last jetstream.Msg

	mu       sync.Mutex
	cons     jetstream.Consumer // nil after a replacement failed
	cc       jetstream.ConsumeContext
	failedAt time.Time
	lastErr  error
	lastMsg  time.Time
	// remaking is when the watch began to wait for the consumer, zero while
	// it does not wait (see watch).
	remaking time.Time
	// replacedAt is when the last replacement was tried.
	replacedAt time.Time
	stopped    atomic.Bool
	done       chan struct{}
}

// feedHeartbeat is the feed's idle heartbeat: two missed ones make the
// client recreate the consumer.
const feedHeartbeat = time.Second

// feedQuiet is how long after its last reported error a feed counts as
// recovered: the client reports errors until it has recreated the consumer.
const feedQuiet = 3 * feedHeartbeat

// replaceAfter is how long nats.go may try to make a feed's consumer again
// before the feed replaces it with a consumer of its own (see watch): two of
// nats.go's attempts (10 s each, with a pause of 1 s and 2 s after them),
// longer than a remake takes when the feed's node dies (an election, then
// the consumer: 3.2 and 7.2 s in TestFailoverUnderCheck).
const replaceAfter = 25 * time.Second

// replaceTimeout bounds one attempt to replace a feed's consumer, and a
// failed one is tried again when it is up: a cluster that serves makes a
// consumer in well under a second, but a request sent while a restarted
// cluster settles can go unanswered (a replacement that waited 10 s for its
// answer, followed by one made at once, in TestWholeClusterRestartUnderCheck).
const replaceTimeout = 3 * feedHeartbeat

// replaceServedAfter is how long nats.go may try to make a feed's consumer
// again while the stream answers requests, before the feed replaces it:
// nats.go pauses 1, 2, 4, 8, then 10 s between its attempts, so that after
// an outage its next attempt came up to 7 s after the cluster served again
// (TestWholeClusterRestartUnderCheck). Longer than a remake takes when the
// cluster serves (a consumer made in well under a second).
const replaceServedAfter = 5 * feedHeartbeat

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
	f := &feed{js: js, stream: stream, cfg: cfg, h: h, done: make(chan struct{})}
	cons, cc, err := f.consume(ctx, 0, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("follow %s: %w", stream, err)
	}
	f.cons, f.cc = cons, cc
	go f.watch()
	return f.stop, f.err, nil
}

// consume makes an ordered consumer with cfg and consumes it as the feed's
// consumer number gen.
func (f *feed) consume(ctx context.Context, gen uint64, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, jetstream.ConsumeContext, error) {
	cons, err := f.js.OrderedConsumer(ctx, f.stream, cfg)
	if err != nil {
		return nil, nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if f.stopped.Load() {
			return
		}
		f.deliver.Lock()
		defer f.deliver.Unlock()
		if f.gen.Load() != gen {
			return
		}
		f.last = m
		f.mu.Lock()
		f.lastMsg = time.Now()
		f.mu.Unlock()
		f.h(m)
	}, jetstream.PullHeartbeat(feedHeartbeat), jetstream.PullExpiry(5*feedHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if f.gen.Load() != gen {
				return
			}
			f.mu.Lock()
			f.failedAt, f.lastErr = time.Now(), err
			f.mu.Unlock()
		}))
	if err != nil {
		DeleteOrdered(f.js, f.stream, cons)
		return nil, nil, err
	}
	return cons, cc, nil
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
// shutdown waited 21 s here. Then, on the same goroutine, the consumer is
// deleted (the server would keep it for minutes, one more for each time a
// feed that stops when idle starts again).
func (f *feed) stop() {
	if f.stopped.Swap(true) {
		return
	}
	close(f.done)
	f.mu.Lock()
	cons, cc := f.cons, f.cc
	f.cons, f.cc = nil, nil
	f.mu.Unlock()
	f.drop(cons, cc)
}

// drop stops and deletes a consumer of the feed, on a goroutine of its own.
func (f *feed) drop(cons jetstream.Consumer, cc jetstream.ConsumeContext) {
	if cc == nil {
		return
	}
	go func() {
		cc.Stop()
		DeleteOrdered(f.js, f.stream, cons)
	}()
}

// watch looks, every heartbeat, whether nats.go is making the consumer
// again: CachedInfo waits for the consumer's lock, which the reset holds
// until a new consumer is made. nats.go reports the missed heartbeats that
// start a reset once, and nothing while its attempts fail, so without this a
// feed whose consumer cannot be made (no meta leader) would count as live
// again after feedQuiet.
//
// When nats.go has tried for replaceAfter, the feed replaces the consumer.
// nats.go's attempts all ask for the consumer under one name; once a
// cluster has placed that name on a node whose JetStream has stopped (its
// disk full: the node stays in the cluster, and R1 consumers are placed on
// any node of the stream that is not offline), every attempt waits for that
// node, for as long as it runs: the feed stayed interrupted for minutes while
// a consumer of another name was made at once (ADR 0028).
func (f *feed) watch() {
	tick := time.NewTicker(feedHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-tick.C:
		}
		f.mu.Lock()
		cons, lastTry := f.cons, f.replacedAt
		f.mu.Unlock()
		if cons == nil {
			// The last replacement failed: try again once its time is up.
			if time.Since(lastTry) >= replaceTimeout {
				f.replace()
			}
			continue
		}
		began := time.Now()
		f.mu.Lock()
		f.remaking = began
		f.mu.Unlock()
		looked := make(chan struct{})
		go func() {
			cons.CachedInfo()
			close(looked)
		}()
		f.await(looked, began)
	}
}

// await waits for nats.go's remake (looked closes once CachedInfo returns),
// and replaces the consumer when nats.go has tried for replaceAfter, or for
// replaceServedAfter while the stream answers requests.
func (f *feed) await(looked <-chan struct{}, began time.Time) {
	tick := time.NewTicker(feedHeartbeat)
	defer tick.Stop()
	deadline := time.After(replaceAfter)
	for {
		select {
		case <-f.done:
			return
		case <-looked:
			f.mu.Lock()
			f.remaking = time.Time{}
			f.mu.Unlock()
			return
		case <-tick.C:
			if time.Since(began) >= replaceServedAfter && f.served() {
				f.replace()
				return
			}
		case <-deadline:
			f.replace()
			return
		}
	}
}

// served reports whether the feed's stream answers a request for its info:
// the cluster can make a consumer of it.
func (f *feed) served() bool {
	ctx, cancel := context.WithTimeout(context.Background(), feedHeartbeat)
	defer cancel()
	_, err := f.js.Stream(ctx, f.stream)
	return err == nil
}

// replace stops the feed's consumer and makes a new one (another name),
// from the stream sequence after the last message the feed delivered.
func (f *feed) replace() {
	f.deliver.Lock()
	gen := f.gen.Add(1)
	cfg := f.cfg
	if f.last != nil {
		if md, err := f.last.Metadata(); err == nil {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, md.Sequence.Stream+1
		}
	}
	f.deliver.Unlock()

	f.mu.Lock()
	old, oldCC := f.cons, f.cc
	f.cons, f.cc, f.replacedAt = nil, nil, time.Now()
	f.failedAt, f.lastErr = f.replacedAt, errReplacing
	f.mu.Unlock()
	f.drop(old, oldCC)

	ctx, cancel := context.WithTimeout(context.Background(), replaceTimeout)
	defer cancel()
	cons, cc, err := f.consume(ctx, gen, cfg)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failedAt, f.lastErr = time.Now(), fmt.Errorf("its consumer could not be replaced: %w", err)
		return
	}
	if f.stopped.Load() {
		f.drop(cons, cc)
		return
	}
	f.cons, f.cc, f.remaking, f.lastErr = cons, cc, time.Time{}, nil
}

var errReplacing = fmt.Errorf("its consumer is being replaced: nats.go tried to make it again for %s", replaceAfter)

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
	if f.cons == nil && !f.stopped.Load() {
		return fmt.Errorf("feed interrupted since %s: %w", f.failedAt.UTC().Format(time.RFC3339), f.lastErr)
	}
	if !f.remaking.IsZero() && time.Since(f.remaking) > remakingFor {
		return fmt.Errorf("feed interrupted: its consumer is being made again since %s (last error: %v)", f.remaking.UTC().Format(time.RFC3339), f.lastErr)
	}
	if f.lastErr == nil || f.lastMsg.After(f.failedAt) || time.Since(f.failedAt) > feedQuiet {
		return nil
	}
	return fmt.Errorf("feed interrupted at %s: %w", f.failedAt.UTC().Format(time.RFC3339), f.lastErr)
}
