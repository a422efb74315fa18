package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// subscriber is the watermill Subscriber of a pipeline: it pulls from the
// durable consumer and hands the router at most Concurrency messages at once.
// It replaces watermill-nats' jetstream subscriber, which buffers 500
// messages, hands them over one at a time, closes its output channel while a
// send may be in flight, and leaves what it buffered unacked at shutdown.
//
// It settles nothing itself except what it never handed over and what the
// router gave back unsettled: those are handed back to the server (naked,
// after handBackDelay) for another instance or a restart. Everything else is
// settled by the pipeline's policy.
type subscriber struct {
	p    *Pipeline
	cons jetstream.Consumer
	once sync.Once
	done chan struct{} // closed when the pump and its messages are done

	// The yield's intake as last read, and when it was last seen growing
	// (the pump's goroutine only).
	intake uint64
	grew   time.Time

	looking atomic.Bool // a lookup of the consumer is running (lookUp)
}

var _ message.Subscriber = (*subscriber)(nil)

// fetchWait is how long one pull request waits for messages. At Close the pump
// waits for the running request to end, so that nothing the server delivers
// goes to an inbox nobody reads (it would wait out the ack wait).
const fetchWait = 500 * time.Millisecond

// handBackDelay is the nak delay of messages handed back at Close: longer
// than a pull request that may still be open, so that the server does not
// redeliver them into it (each such delivery would count).
const handBackDelay = fetchWait + 500*time.Millisecond

// Subscribe starts the pump; the topic is ignored (the consumer decides what
// is delivered). The channel closes after Close or when ctx ends, once no
// send is pending and every message handed over is back.
func (s *subscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	stop := make(chan struct{})
	go func() {
		select {
		case <-s.p.closing:
		case <-ctx.Done():
		case <-s.done:
		}
		s.once.Do(func() { close(stop) })
	}()
	go func() {
		defer close(s.done)
		s.pump(ctx, out, stop)
	}()
	return out, nil
}

// pump fetches batches and hands their messages over, at most Concurrency at a
// time. It pauses while a message is held for an infrastructure fault: new
// messages would fail the same way.
func (s *subscriber) pump(ctx context.Context, out chan<- *message.Message, stop <-chan struct{}) {
	var inflight sync.WaitGroup
	defer func() {
		inflight.Wait()
		close(out) // nobody sends any more
	}()
	slots := make(chan struct{}, s.p.cfg.Concurrency)
	failures := 0
	var last lastTaken
	pause := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		if s.p.held.Load() > 0 {
			if !pause(50 * time.Millisecond) {
				return
			}
			continue
		}
		if y := s.p.cfg.Yield; y != nil && y.Intake != nil {
			s.intakeGrew(y, time.Now())
			if y.due(last.pending, time.Since(last.stored)) {
				tick := time.NewTicker(yieldTick)
				yielded := s.yield(y, last, stop, tick.C)
				tick.Stop()
				if !yielded {
					return
				}
			}
		}
		batch, err := s.cons.Fetch(s.p.cfg.Concurrency, jetstream.FetchMaxWait(fetchWait))
		if err == nil {
			msgs := batch.Messages()
			for jm := range msgs {
				s.dispatch(ctx, s.together(jm, msgs), out, stop, slots, &inflight, &last)
			}
			if err = batch.Error(); errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				err = nil // an empty pull: nothing to do
			}
		}
		if err == nil {
			s.p.setGone(nil) // also after a lookup that answered before the consumer was made again
			failures = 0
			continue
		}
		// NATS is away, or the consumer has no leader (a pull then fails at
		// once): wait before the next pull, longer each time. A consumer
		// that does not exist fails the same way (no responders), so from
		// the third failure on, the consumer is looked up, on the side: a
		// lookup that waits for a cluster without leaders must not delay
		// the next pull.
		failures++
		s.p.logger.Debug("fetch", "err", err, "failures", failures)
		if failures >= 3 && s.looking.CompareAndSwap(false, true) {
			go func() {
				defer s.looking.Store(false)
				s.lookUp()
			}()
		}
		if !pause(min(50*time.Millisecond<<min(failures-1, 5), time.Second)) {
			return
		}
	}
}

// lookUp asks JetStream whether the consumer exists, and records the
// answer; an answer of neither kind (NATS unavailable) changes nothing.
func (s *subscriber) lookUp() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := s.p.js.Consumer(ctx, s.p.cfg.Stream, s.p.cfg.Consumer)
	switch {
	case err == nil:
		s.p.setGone(nil)
	case errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
		s.p.setGone(err)
	}
}

// intakeGrew reads y's intake at now and returns when it was last seen
// growing: now if it grew since the last reading.
func (s *subscriber) intakeGrew(y *Yield, now time.Time) time.Time {
	if in := y.Intake(); in != s.intake {
		s.intake, s.grew = in, now
	}
	return s.grew
}

// yield waits while y says the pipeline should and the intake grows (Yield),
// looking at each tick, at least one; false after stop. The intake counts as
// growing until it has not grown for the quiet time, since before the pause
// too: a pause that begins after the burst is over ends at the first look.
func (s *subscriber) yield(y *Yield, last lastTaken, stop <-chan struct{}, tick <-chan time.Time) bool {
	y.paused.Add(1)
	defer y.paused.Add(-1)
	for since := time.Now(); ; {
		select {
		case <-stop:
			return false
		case <-tick:
			// Counted as it goes (a pause can be long), from the clock, not
			// the tick's time: a tick received late carries the time it was
			// due, which can be before since, and a counter cannot go back
			// (a panic that stopped orderly in a 60 s load).
			now := time.Now()
			s.p.m.yielded.Add(now.Sub(since).Seconds())
			since = now
		}
		if since.Sub(s.intakeGrew(y, since)) >= y.quietFor() || !y.due(last.pending, time.Since(last.stored)) {
			return true // the burst is over, someone waits, or the lag is reached
		}
	}
}

// batchesInFlight is how many batches share the Concurrency deliveries in
// hand: one batch would wait for its writes while nothing else is handled.
// Measured with scripts/drain-rate.sh (ADR 0011).
const batchesInFlight = 4

// together is jm and, when the handler takes batches, the messages of the
// fetch that have arrived with it (never waiting for more), up to a quarter
// of Concurrency: one router message.
func (s *subscriber) together(jm jetstream.Msg, msgs <-chan jetstream.Msg) []jetstream.Msg {
	group := []jetstream.Msg{jm}
	if s.p.h.HandleBatch == nil {
		return group
	}
	for len(group) < max(1, s.p.cfg.Concurrency/batchesInFlight) {
		select {
		case m, ok := <-msgs:
			if !ok {
				return group
			}
			group = append(group, m)
		default:
			return group
		}
	}
	return group
}

// dispatch hands the messages to the router as one router message, or naks
// them after stop. Each takes one of the slots while in hand. last learns the
// pending count and store time of the last one.
func (s *subscriber) dispatch(ctx context.Context, jms []jetstream.Msg, out chan<- *message.Message, stop <-chan struct{}, slots chan struct{}, inflight *sync.WaitGroup, last *lastTaken) {
	ds := make([]*Delivery, len(jms))
	for i, jm := range jms {
		ds[i] = &Delivery{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data(), msg: jm}
	}
	handBack := func() {
		for _, d := range ds {
			s.p.nak(d, handBackDelay)
		}
	}
	for i := range ds {
		select {
		case slots <- struct{}{}:
		case <-stop:
			for range i {
				<-slots
			}
			handBack()
			return
		}
	}
	release := func() {
		for range ds {
			<-slots
		}
	}
	// While a message is held for an infrastructure fault, fetched ones wait
	// here (kept in progress): they would fail the same way, and a nak would
	// count a delivery.
	for last := time.Now(); s.p.held.Load() > 0; {
		if time.Since(last) >= s.p.ackWait/3 {
			for _, d := range ds {
				_ = d.msg.InProgress()
			}
			last = time.Now()
		}
		select {
		case <-stop:
			release()
			handBack()
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	valid := ds[:0]
	for _, d := range ds {
		meta, err := d.msg.Metadata()
		if err != nil { // cannot happen for a consumer's message; nothing to handle it by
			<-slots
			s.p.logger.Error("message without metadata; naked", "subject", d.Subject, "err", err)
			s.p.nak(d, s.p.cfg.Backoff.Max)
			continue
		}
		d.Stream, d.Seq, d.Delivered = meta.Stream, meta.Sequence.Stream, int(meta.NumDelivered)
		*last = lastTaken{pending: meta.NumPending, stored: meta.Timestamp}
		valid = append(valid, d)
	}
	if ds = valid; len(ds) == 0 {
		return
	}
	first := ds[0]
	m := message.NewMessage(first.Stream+"."+strconv.FormatUint(first.Seq, 10), first.Data)
	m.SetContext(context.WithValue(context.WithoutCancel(ctx), batchKey{}, &batch{ds: ds}))
	select {
	case out <- m:
	case <-stop:
		release()
		handBack()
		return
	}
	inflight.Add(1)
	go func() {
		defer inflight.Done()
		select {
		case <-m.Acked():
		case <-m.Nacked():
		}
		release()
		handBack() // a no-op for those the policy settled
	}()
}

// Close waits (up to CloseTimeout) until the pump stopped and every message
// handed over is back; the pipeline's closing signal stops the pump.
func (s *subscriber) Close() error {
	s.p.once.Do(func() { close(s.p.closing) })
	select {
	case <-s.done:
		return nil
	case <-time.After(s.p.cfg.CloseTimeout):
		return fmt.Errorf("pipeline %s: messages still in hand after %s", s.p.cfg.Name, s.p.cfg.CloseTimeout)
	}
}

// workers runs attempts on n long-lived goroutines instead of the router's
// goroutine per message: those start with small stacks, and handlers that
// encode and decode JSON grow them on every message; a pool's stacks grow
// once (measured: 7% of the processor's CPU). Watermill's Recoverer runs
// inside, on the worker, so that a panic becomes the attempt's error.
type workers struct {
	jobs chan *job
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

type job struct {
	h    message.HandlerFunc
	msg  *message.Message
	out  []*message.Message
	err  error
	done chan struct{}
}

var jobPool = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

func newWorkers(n int) *workers {
	w := &workers{jobs: make(chan *job), quit: make(chan struct{})}
	for i := 0; i < n; i++ {
		w.wg.Add(1)
		go w.work()
	}
	return w
}

func (w *workers) work() {
	defer w.wg.Done()
	for {
		select {
		case j := <-w.jobs:
			j.out, j.err = j.h(j.msg)
			j.done <- struct{}{}
		case <-w.quit:
			return
		}
	}
}

// errWorkersStopped fails attempts after stop; it is an infrastructure fault
// of this process, so the policy hands the message back for redelivery.
var errWorkersStopped = errors.New("pipeline workers stopped")

func (w *workers) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		j := jobPool.Get().(*job)
		j.h, j.msg = h, msg
		select {
		case w.jobs <- j:
		case <-w.quit:
			jobPool.Put(j)
			return nil, errWorkersStopped
		}
		<-j.done
		out, err := j.out, j.err
		j.h, j.msg, j.out, j.err = nil, nil, nil, nil
		jobPool.Put(j)
		return out, err
	}
}

func (w *workers) stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}
