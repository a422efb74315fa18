// Package wm binds watermill routers to orderly's durable JetStream consumers.
//
// Its Subscriber is a watermill message.Subscriber over a durable pull consumer
// (created by natsx.Topology.Ensure). It replaces watermill-nats' pkg/jetstream
// subscriber, which hands the router one message at a time per subscription,
// closes its output channel while a send may be in progress (a data race and a
// possible panic at shutdown), and leaves the messages it buffered unacked at
// shutdown, so they wait out the whole ack wait before anyone gets them again.
//
// The ack contract:
//   - up to Concurrency messages are in the router's hands at once;
//   - a message is acked only after the handler returned nil (the ack is not
//     confirmed: a lost ack is a redelivery, and handlers are idempotent);
//   - a handler error naks it with a growing delay (Backoff);
//   - at Close, messages fetched but not handed to the router are naked at once
//     (redelivered immediately, to another instance or after a restart), and
//     messages in the router's hands are acked or naked when their handler ends;
//   - a handler that outlives the consumer's ack wait is redelivered by the
//     server meanwhile: handlers must be idempotent (orderly's are).
//
// Nothing is acked that was not handled.
package wm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Metadata keys set on every message.
const (
	// MetaStreamSeq is the message's sequence in its stream.
	MetaStreamSeq = "orderly_stream_seq"
	// MetaDelivered is how many times the message was delivered, 1 the first time.
	MetaDelivered = "orderly_delivered"
	// MetaSubject is the message's subject.
	MetaSubject = "orderly_subject"
)

// Delivered returns how often msg was delivered, 1 the first time.
func Delivered(msg *message.Message) int {
	n, _ := strconv.Atoi(msg.Metadata.Get(MetaDelivered))
	return n
}

// StreamSeq returns the stream sequence of msg, 0 when unknown.
func StreamSeq(msg *message.Message) uint64 {
	n, _ := strconv.ParseUint(msg.Metadata.Get(MetaStreamSeq), 10, 64)
	return n
}

// Logger adapts logger for watermill, with watermill's per-message info logs
// lowered to debug.
func Logger(logger *slog.Logger) watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug,
	})
}

// Backoff spaces redeliveries after handler errors: Base after the first
// delivery, doubling up to Max.
type Backoff struct{ Base, Max time.Duration }

// Delay is the nak delay after the given delivery.
func (b Backoff) Delay(delivered uint64) time.Duration {
	d := b.Base
	for i := uint64(1); i < delivered && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Stream and Consumer name the durable consumer; it must exist.
	Stream, Consumer string
	// Concurrency is how many messages the router may handle at once.
	Concurrency int
	// Prefetch is how many messages the client buffers ahead of the handlers.
	Prefetch int
	// Backoff spaces redeliveries after handler errors.
	Backoff Backoff
	// CloseTimeout bounds how long Close waits for handlers in flight.
	CloseTimeout time.Duration
}

// Validate reports every problem with c.
func (c SubscriberConfig) Validate() error {
	var errs []error
	if c.Stream == "" || c.Consumer == "" {
		errs = append(errs, errors.New("subscriber: stream and consumer are required"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("subscriber: concurrency must be at least 1, got %d", c.Concurrency))
	}
	if c.Prefetch < 1 {
		errs = append(errs, fmt.Errorf("subscriber: prefetch must be at least 1, got %d", c.Prefetch))
	}
	if c.CloseTimeout <= 0 {
		errs = append(errs, errors.New("subscriber: close timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Subscriber is a watermill subscriber over one durable JetStream consumer.
type Subscriber struct {
	js      jetstream.JetStream
	cfg     SubscriberConfig
	logger  *slog.Logger
	closing chan struct{}
	once    sync.Once
	running sync.WaitGroup // pumps and ack waiters
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber that uses js.
func NewSubscriber(js jetstream.JetStream, cfg SubscriberConfig, logger *slog.Logger) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Subscriber{js: js, cfg: cfg, logger: logger, closing: make(chan struct{})}, nil
}

// Subscribe starts delivering the consumer's messages; the topic is ignored
// (the consumer decides what is delivered). The channel closes after Close or
// when ctx ends, once no send is pending.
func (s *Subscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, errors.New("subscriber closed")
	default:
	}
	cons, err := s.js.Consumer(ctx, s.cfg.Stream, s.cfg.Consumer)
	if err != nil {
		return nil, fmt.Errorf("durable consumer %s on %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
	}
	out := make(chan *message.Message)
	stop := make(chan struct{})
	s.running.Add(2)
	pumped := make(chan struct{})
	go func() {
		defer s.running.Done()
		select {
		case <-s.closing:
		case <-ctx.Done():
		case <-pumped:
			return
		}
		close(stop)
	}()
	go func() {
		defer s.running.Done()
		defer close(pumped)
		s.pump(ctx, cons, out, stop)
	}()
	return out, nil
}

// fetchWait is how long one pull request waits for messages. At Close the pump
// waits for the running request to end, so that nothing the server delivers
// goes to an inbox nobody reads (it would wait out the ack wait).
const fetchWait = 500 * time.Millisecond

// pump fetches batches and hands their messages to the router, at most
// Concurrency at a time. After stop it naks what it receives.
func (s *Subscriber) pump(ctx context.Context, cons jetstream.Consumer, out chan<- *message.Message, stop <-chan struct{}) {
	var inflight sync.WaitGroup
	defer func() {
		inflight.Wait()
		close(out) // nobody sends any more
	}()
	sem := make(chan struct{}, s.cfg.Concurrency)
	for {
		select {
		case <-stop:
			return
		default:
		}
		batch, err := cons.Fetch(s.cfg.Prefetch, jetstream.FetchMaxWait(fetchWait))
		if err != nil { // NATS is away: try again shortly
			s.logger.Debug("fetch", "consumer", s.cfg.Consumer, "err", err)
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for jm := range batch.Messages() {
			s.dispatch(ctx, jm, out, stop, sem, &inflight)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			s.logger.Debug("fetch", "consumer", s.cfg.Consumer, "err", err)
		}
	}
}

// dispatch hands jm to the router (or naks it after stop) and settles it once
// the router is done.
func (s *Subscriber) dispatch(ctx context.Context, jm jetstream.Msg, out chan<- *message.Message, stop <-chan struct{}, sem chan struct{}, inflight *sync.WaitGroup) {
	select {
	case sem <- struct{}{}:
	case <-stop:
		s.nak(jm, 0)
		return
	}
	m := toMessage(jm)
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.SetContext(mctx)
	select {
	case out <- m:
	case <-stop:
		cancel()
		<-sem
		s.nak(jm, 0)
		return
	}
	inflight.Add(1)
	go func() {
		defer inflight.Done()
		defer func() { <-sem }()
		defer cancel()
		s.settle(m, jm)
	}()
}

// settle acks or naks jm once the router is done with m.
func (s *Subscriber) settle(m *message.Message, jm jetstream.Msg) {
	select {
	case <-m.Acked():
		// The ack is not confirmed (no DoubleAck): it follows the stored work,
		// and an ack that is lost makes the server redeliver after the ack
		// wait, which the idempotent handler turns into nothing new. A
		// confirmation would cost a reply per message for no guarantee.
		if err := jm.Ack(); err != nil {
			s.logger.Warn("ack failed", "consumer", s.cfg.Consumer, "subject", jm.Subject(), "err", err)
		}
	case <-m.Nacked():
		var delivered uint64
		if md, err := jm.Metadata(); err == nil {
			delivered = md.NumDelivered
		}
		s.nak(jm, s.cfg.Backoff.Delay(delivered))
	}
}

func (s *Subscriber) nak(jm jetstream.Msg, delay time.Duration) {
	var err error
	if delay > 0 {
		err = jm.NakWithDelay(delay)
	} else {
		err = jm.Nak()
	}
	if err != nil {
		s.logger.Debug("nak failed; redelivered after the ack wait", "consumer", s.cfg.Consumer, "err", err)
	}
}

// Close stops fetching, naks what was fetched and not handled, and waits (up to
// CloseTimeout) until the messages in the router's hands are settled.
func (s *Subscriber) Close() error {
	s.once.Do(func() { close(s.closing) })
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(s.cfg.CloseTimeout):
		return fmt.Errorf("subscriber %s: handlers still running after %s", s.cfg.Consumer, s.cfg.CloseTimeout)
	}
}

// toMessage keeps the payload as is and the JetStream metadata in the
// watermill metadata.
func toMessage(jm jetstream.Msg) *message.Message {
	md := make(message.Metadata, 4)
	for k, v := range jm.Headers() {
		if len(v) > 0 {
			md[k] = v[0]
		}
	}
	md[MetaSubject] = jm.Subject()
	id := jm.Headers().Get(jetstream.MsgIDHeader)
	if meta, err := jm.Metadata(); err == nil {
		md[MetaStreamSeq] = strconv.FormatUint(meta.Sequence.Stream, 10)
		md[MetaDelivered] = strconv.FormatUint(meta.NumDelivered, 10)
		if id == "" {
			id = meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
	}
	m := message.NewMessage(id, jm.Data())
	m.Metadata = md
	return m
}

// Workers is a router middleware that runs handlers on n long-lived
// goroutines instead of the router's goroutine per message. The router's
// goroutines start with small stacks, and handlers that encode and decode JSON
// grow them on every message; a pool's stacks grow once. A panic in a handler
// becomes its error (the router's Recoverer cannot see other goroutines).
type Workers struct {
	jobs chan *job
	stop chan struct{}
	wg   sync.WaitGroup
}

type job struct {
	h    message.HandlerFunc
	msg  *message.Message
	out  []*message.Message
	err  error
	done chan struct{}
}

var jobPool = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

// NewWorkers starts n workers; Stop ends them.
func NewWorkers(n int) *Workers {
	w := &Workers{jobs: make(chan *job), stop: make(chan struct{})}
	for i := 0; i < n; i++ {
		w.wg.Add(1)
		go w.work()
	}
	return w
}

func (w *Workers) work() {
	defer w.wg.Done()
	for {
		select {
		case j := <-w.jobs:
			j.out, j.err = run(j.h, j.msg)
			j.done <- struct{}{}
		case <-w.stop:
			return
		}
	}
}

func run(h message.HandlerFunc, msg *message.Message) (out []*message.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(msg)
}

// Middleware runs the handler on a worker.
func (w *Workers) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		j := jobPool.Get().(*job)
		j.h, j.msg = h, msg
		select {
		case w.jobs <- j:
		case <-w.stop:
			jobPool.Put(j)
			return nil, errors.New("workers stopped")
		}
		<-j.done
		out, err := j.out, j.err
		j.h, j.msg, j.out, j.err = nil, nil, nil, nil
		jobPool.Put(j)
		return out, err
	}
}

// Stop ends the workers once they finish their jobs.
func (w *Workers) Stop() {
	close(w.stop)
	w.wg.Wait()
}
