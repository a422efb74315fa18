package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
		batch, err := s.cons.Fetch(s.p.cfg.Concurrency, jetstream.FetchMaxWait(fetchWait))
		if err == nil {
			for jm := range batch.Messages() {
				s.dispatch(ctx, jm, out, stop, slots, &inflight)
			}
			if err = batch.Error(); errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				err = nil // an empty pull: nothing to do
			}
		}
		if err == nil {
			failures = 0
			continue
		}
		// NATS is away, or the consumer has no leader (a pull then fails at
		// once): wait before the next pull, longer each time.
		failures++
		s.p.logger.Debug("fetch", "err", err, "failures", failures)
		if !pause(min(50*time.Millisecond<<min(failures-1, 5), time.Second)) {
			return
		}
	}
}

// dispatch hands jm to the router, or naks it after stop.
func (s *subscriber) dispatch(ctx context.Context, jm jetstream.Msg, out chan<- *message.Message, stop <-chan struct{}, slots chan struct{}, inflight *sync.WaitGroup) {
	d := &Delivery{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data(), msg: jm}
	select {
	case slots <- struct{}{}:
	case <-stop:
		s.p.nak(d, handBackDelay, "retried")
		return
	}
	// While a message is held for an infrastructure fault, fetched ones wait
	// here (kept in progress): they would fail the same way, and a nak would
	// count a delivery.
	for last := time.Now(); s.p.held.Load() > 0; {
		if time.Since(last) >= s.p.ackWait/3 {
			_ = jm.InProgress()
			last = time.Now()
		}
		select {
		case <-stop:
			<-slots
			s.p.nak(d, handBackDelay, "retried")
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	meta, err := jm.Metadata()
	if err != nil { // cannot happen for a consumer's message; nothing to handle it by
		<-slots
		s.p.logger.Error("message without metadata; naked", "subject", jm.Subject(), "err", err)
		s.p.nak(d, s.p.cfg.Backoff.Max, "retried")
		return
	}
	d.Stream, d.Seq, d.Delivered = meta.Stream, meta.Sequence.Stream, int(meta.NumDelivered)
	m := message.NewMessage(d.Stream+"."+strconv.FormatUint(d.Seq, 10), d.Data)
	m.SetContext(context.WithValue(context.WithoutCancel(ctx), deliveryKey{}, d))
	select {
	case out <- m:
	case <-stop:
		<-slots
		s.p.nak(d, handBackDelay, "retried")
		return
	}
	inflight.Add(1)
	go func() {
		defer inflight.Done()
		select {
		case <-m.Acked():
		case <-m.Nacked():
		}
		<-slots
		s.p.nak(d, handBackDelay, "retried") // a no-op when the policy settled it
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
