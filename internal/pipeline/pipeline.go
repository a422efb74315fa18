package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/tracing"
)

// Delivery is one delivery of a message, as a handler sees it.
type Delivery struct {
	// Stream and Seq are the message's stream and its sequence there.
	Stream string
	Seq    uint64
	// Subject, Header and Data are the message as stored.
	Subject string
	Header  nats.Header
	Data    []byte
	// Delivered counts the deliveries of the message, 1 the first time.
	Delivered int

	msg     jetstream.Msg
	settled atomic.Bool
}

// Handler is what a pipeline runs: Handle or HandleBatch (which takes
// precedence); GiveUp is optional.
type Handler struct {
	// Handle handles one delivery; see the package comment for what its
	// error means. It must be idempotent.
	Handle func(ctx context.Context, d *Delivery) error
	// HandleBatch handles the deliveries that arrived together (at most a
	// quarter of Concurrency), or one alone, in one attempt, and returns each
	// one's error in order, each meaning what Handle's would. Each delivery is then settled
	// on its own; those held during an infrastructure fault are tried again
	// together. The trace of a delivery is d.Trace(ctx).
	HandleBatch func(ctx context.Context, ds []*Delivery) []error
	// GiveUp runs before a message that cannot be handled is dead-lettered,
	// with the cause; it records what the failure means (and must be
	// idempotent). An error keeps the message: the give-up is tried again.
	GiveUp func(ctx context.Context, d *Delivery, cause error) error
}

// Backoff spaces retries: Base after the first, doubling up to Max.
type Backoff struct{ Base, Max time.Duration }

// Delay is the wait after the n-th failure (n >= 1).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Config configures a pipeline. Zero fields take the defaults of setDefaults.
type Config struct {
	// Name names the pipeline in logs and metrics, such as "processor".
	Name string
	// Stream and Consumer name the durable pull consumer; it must exist, with
	// explicit acks and no bound on deliveries.
	Stream, Consumer string
	// Concurrency is how many messages are handled at once (default 16).
	Concurrency int
	// MaxAttempts is the delivery on which a message whose handler keeps
	// failing is given up; 0 never gives up (it is retried for ever).
	MaxAttempts int
	// Backoff spaces the redeliveries after handler failures (default 100ms
	// doubling to 5s).
	Backoff Backoff
	// FaultBackoff spaces the retries of a message held during an
	// infrastructure fault (default 100ms doubling to 1s: a leader election
	// is over within seconds, and a message should not sleep through its end).
	FaultBackoff Backoff
	// Timeout bounds one attempt of the handler, and each write of a give-up
	// (default 5s). It must be shorter than the consumer's ack wait.
	Timeout time.Duration
	// DeadLetterSubject receives the messages given up; required when
	// MaxAttempts > 0.
	DeadLetterSubject string
	// CloseTimeout bounds how long Close waits for messages in hand (default 30s).
	CloseTimeout time.Duration
	// Yield, when not nil, lets the handling trail the stream while the
	// pipeline is behind and nobody waits (off by default).
	Yield *Yield
}

func (c *Config) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Backoff == (Backoff{}) {
		c.Backoff = Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	}
	if c.FaultBackoff == (Backoff{}) {
		c.FaultBackoff = Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 30 * time.Second
	}
}

// Validate reports every problem with c; zero fields count as their defaults.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("pipeline: name is required"))
	}
	if c.Stream == "" || c.Consumer == "" {
		errs = append(errs, errors.New("pipeline: stream and consumer are required"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("pipeline %s: concurrency must be at least 1, got %d", c.Name, c.Concurrency))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("pipeline %s: max attempts must not be negative, got %d", c.Name, c.MaxAttempts))
	}
	if c.MaxAttempts > 0 && c.DeadLetterSubject == "" {
		errs = append(errs, fmt.Errorf("pipeline %s: a dead-letter subject is required to give up after %d attempts", c.Name, c.MaxAttempts))
	}
	for _, b := range []Backoff{c.Backoff, c.FaultBackoff} {
		if b.Base <= 0 || b.Max < b.Base {
			errs = append(errs, fmt.Errorf("pipeline %s: backoff %v: base must be positive and at most max", c.Name, b))
		}
	}
	if c.Timeout <= 0 || c.CloseTimeout <= 0 {
		errs = append(errs, fmt.Errorf("pipeline %s: timeouts must be positive", c.Name))
	}
	return errors.Join(errs...)
}

// Pipeline is a running consumer. Run it once; Close stops it.
type Pipeline struct {
	cfg     Config
	js      jetstream.JetStream
	pub     jsstore.Publisher
	h       Handler
	logger  *slog.Logger
	router  *message.Router
	workers *workers
	m       *metrics

	ackWait time.Duration // the consumer's, read at Run
	closing chan struct{}
	once    sync.Once
	held    atomic.Int64 // deliveries held during an infrastructure fault
	sub     *subscriber
	gone    atomic.Pointer[error] // why nothing is consumed: the consumer does not exist
}

// New builds a pipeline that consumes through js and writes dead letters
// through pub (js itself, or a guarded publisher). reg receives its metrics
// (labelled with the pipeline's name).
func New(cfg Config, js jetstream.JetStream, pub jsstore.Publisher, h Handler, reg prometheus.Registerer, logger *slog.Logger) (*Pipeline, error) {
	cfg.setDefaults()
	var errs []error
	errs = append(errs, cfg.Validate())
	if js == nil || pub == nil || h.Handle == nil && h.HandleBatch == nil || reg == nil || logger == nil {
		errs = append(errs, fmt.Errorf("pipeline %s: nil dependency", cfg.Name))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	logger = logger.With("component", cfg.Name)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, wmLogger(logger))
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg, cfg.Name, backlog(js, cfg.Stream, cfg.Consumer))
	if err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg, js: js, pub: pub, h: h, logger: logger, router: router, m: m,
		workers: newWorkers(cfg.Concurrency), closing: make(chan struct{})}
	// The policy is outermost; each attempt runs on a worker, where the
	// Recoverer turns a panic into an error that the policy sees.
	router.AddMiddleware(p.policy, p.workers.middleware, middleware.Recoverer)
	return p, nil
}

// wmLogger adapts logger for watermill, with its per-message info logs
// lowered to debug. Its trace, debug and info calls return at once when
// their level is off: watermill's adapter converts the fields of every call
// first (two trace lines per message, about 1% of the CPU of an order).
func wmLogger(logger *slog.Logger) watermill.LoggerAdapter {
	return quietLogger{watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}), logger}
}

type quietLogger struct {
	watermill.LoggerAdapter
	l *slog.Logger
}

func (q quietLogger) on(level slog.Level) bool { return q.l.Enabled(context.Background(), level) }

func (q quietLogger) Trace(msg string, fields watermill.LogFields) {
	if q.on(watermill.LevelTrace) {
		q.LoggerAdapter.Trace(msg, fields)
	}
}

func (q quietLogger) Debug(msg string, fields watermill.LogFields) {
	if q.on(slog.LevelDebug) {
		q.LoggerAdapter.Debug(msg, fields)
	}
}

func (q quietLogger) Info(msg string, fields watermill.LogFields) {
	if q.on(slog.LevelDebug) { // lowered to debug
		q.LoggerAdapter.Info(msg, fields)
	}
}

func (q quietLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return quietLogger{q.LoggerAdapter.With(fields), q.l}
}

// Run consumes until Close. It returns once the router stopped; an error when
// the consumer is missing or would let the server drop messages.
func (p *Pipeline) Run(ctx context.Context) error {
	cons, err := p.consumer(ctx)
	if err != nil {
		return fmt.Errorf("pipeline %s: consumer %s on %s: %w", p.cfg.Name, p.cfg.Consumer, p.cfg.Stream, err)
	}
	cc := cons.CachedInfo().Config
	if cc.MaxDeliver > 0 {
		return fmt.Errorf("pipeline %s: consumer %s bounds deliveries to %d: the server would move past failing messages; orderly's topology sets -1",
			p.cfg.Name, p.cfg.Consumer, cc.MaxDeliver)
	}
	if cc.AckPolicy != jetstream.AckExplicitPolicy {
		return fmt.Errorf("pipeline %s: consumer %s must ack explicitly", p.cfg.Name, p.cfg.Consumer)
	}
	if p.cfg.Timeout >= cc.AckWait {
		return fmt.Errorf("pipeline %s: timeout %s must be shorter than the consumer's ack wait %s", p.cfg.Name, p.cfg.Timeout, cc.AckWait)
	}
	p.ackWait = cc.AckWait
	p.sub = &subscriber{p: p, cons: cons, done: make(chan struct{})}
	p.router.AddConsumerHandler(p.cfg.Name, p.cfg.Stream, p.sub, p.handle)
	return p.router.Run(ctx)
}

// consumer looks the consumer up, retrying while JetStream is unavailable (a
// cluster that is still electing leaders) until ctx ends or Close.
func (p *Pipeline) consumer(ctx context.Context) (jetstream.Consumer, error) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err := p.js.Consumer(cctx, p.cfg.Stream, p.cfg.Consumer)
		cancel()
		if err == nil || !jsstore.IsUnavailable(err) {
			return cons, err
		}
		p.logger.Warn("waiting for the consumer", "consumer", p.cfg.Consumer, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.closing:
			return nil, errors.New("closed")
		case <-time.After(wait):
		}
	}
}

// Running is closed once the pipeline consumes.
func (p *Pipeline) Running() <-chan struct{} { return p.router.Running() }

// Close stops fetching, hands back what was fetched and not handled, ends the
// holds (their messages are naked for redelivery), waits up to CloseTimeout
// for the messages in hand, and stops the workers.
func (p *Pipeline) Close() error {
	p.once.Do(func() { close(p.closing) })
	err := p.router.Close()
	p.workers.stop()
	return err
}

// Name is the pipeline's name (Config.Name).
func (p *Pipeline) Name() string { return p.cfg.Name }

// Held is the number of messages held during an infrastructure fault.
func (p *Pipeline) Held() int { return int(p.held.Load()) }

// Consuming is nil while the pipeline's consumer exists, and says so when
// it was found gone (deleted by hand, or not brought back by a restore),
// until it exists again: meanwhile nothing is consumed, and the messages
// wait in the stream.
func (p *Pipeline) Consuming() error {
	if err := p.gone.Load(); err != nil {
		return *err
	}
	return nil
}

// setGone records whether the consumer is gone (err is the lookup's
// ErrConsumerNotFound or ErrStreamNotFound), logging each change.
func (p *Pipeline) setGone(err error) {
	if err == nil {
		if p.gone.Load() != nil && p.gone.Swap(nil) != nil { // a Load first: it runs at every pull
			p.logger.Info("the consumer exists again: consumption resumed", "stream", p.cfg.Stream, "consumer", p.cfg.Consumer)
		}
		return
	}
	gone := fmt.Errorf("consumer %s on %s does not exist, so nothing is consumed: orderly setup makes it again (it then delivers the retained messages again from the first one not known to be handled): %w",
		p.cfg.Consumer, p.cfg.Stream, err)
	if p.gone.Swap(&gone) == nil {
		p.logger.Error("the pipeline's consumer is gone", "stream", p.cfg.Stream, "consumer", p.cfg.Consumer, "err", gone)
	}
}

type batchKey struct{}

// batch is the deliveries of one router message: those that arrived
// together, or one when the handler has no HandleBatch.
type batch struct {
	ds   []*Delivery
	try  []*Delivery // the deliveries of the current attempt
	errs []error     // their errors, set by the attempt
}

func batchOf(m *message.Message) *batch { return m.Context().Value(batchKey{}).(*batch) }

// errNoOutcome fails a delivery for which HandleBatch returned no error slot.
var errNoOutcome = errors.New("pipeline: the handler returned no outcome for the delivery")

// handle is the innermost watermill handler: one attempt of the Handler on
// the batch's current deliveries.
func (p *Pipeline) handle(m *message.Message) error {
	b := batchOf(m)
	b.errs = nil
	if p.h.HandleBatch != nil {
		ctx, cancel := context.WithTimeout(m.Context(), p.cfg.Timeout)
		defer cancel()
		b.errs = p.h.HandleBatch(ctx, b.try)
		return nil
	}
	b.errs = make([]error, len(b.try))
	for i, d := range b.try {
		ctx, cancel := context.WithTimeout(d.Trace(m.Context()), p.cfg.Timeout)
		b.errs[i] = p.h.Handle(ctx, d)
		cancel()
	}
	return nil
}

// Trace is ctx with the trace context of d's headers (W3C traceparent), so
// that the handler's spans and every log line about d carry d's trace.
func (d *Delivery) Trace(ctx context.Context) context.Context {
	return tracing.Extract(ctx, tracing.HeaderCarrier(d.Header))
}

// policy runs attempts of a batch and settles each delivery (see the package
// comment): those held during an infrastructure fault are tried again
// together, the others are settled at once. An attempt of several
// deliveries that fails as a whole (a panic) settles none of them: each is
// then tried alone, at once, so that one poisoned message costs the others
// no delivery.
func (p *Pipeline) policy(next message.HandlerFunc) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) {
		b := batchOf(m)
		p.m.batches.Observe(float64(len(b.ds)))
		for _, d := range p.attempts(m, next, b, b.ds) {
			p.attempts(m, next, b, []*Delivery{d})
		}
		return nil, nil
	}
}

// attempts runs attempts of ds until each is settled. It returns the
// deliveries of an attempt of several that failed as a whole, unsettled.
func (p *Pipeline) attempts(m *message.Message, next message.HandlerFunc, b *batch, ds []*Delivery) (alone []*Delivery) {
	var hold holding
	defer hold.set(p, 0, nil)
	b.try = ds
	for faults := 1; ; faults++ {
		_, attemptErr := next(m)
		if attemptErr != nil && len(b.try) > 1 && !errors.Is(attemptErr, errWorkersStopped) {
			return b.try
		}
		var held []*Delivery
		var fault error
		for i, d := range b.try {
			err := attemptErr
			if err == nil {
				err = errNoOutcome
				if i < len(b.errs) {
					err = b.errs[i]
				}
			}
			switch {
			case err == nil:
				p.ack(d, outcomeAcked)
			case errors.Is(err, errWorkersStopped):
				p.nak(d, handBackDelay)
			case isPermanent(err):
				p.giveUp(d, err)
			case jsstore.IsUnavailable(err):
				held, fault = append(held, d), err
			case p.cfg.MaxAttempts > 0 && d.Delivered >= p.cfg.MaxAttempts:
				p.giveUp(d, fmt.Errorf("after %d deliveries: %w", d.Delivered, err))
			default:
				p.logger.WarnContext(d.Trace(context.Background()), "handler failed; redelivering later", "seq", d.Seq, "delivered", d.Delivered, "err", err)
				p.nak(d, p.cfg.Backoff.Delay(d.Delivered))
			}
		}
		if len(held) == 0 {
			return nil
		}
		p.m.faults.Add(float64(len(held)))
		hold.set(p, len(held), fault)
		if !p.wait(held, p.cfg.FaultBackoff.Delay(faults)) {
			for _, d := range held {
				p.nak(d, handBackDelay)
			}
			return nil
		}
		b.try = held
	}
}

// giveUp records the failure (Handler.GiveUp), dead-letters the message and
// acks it; while a write is unavailable it holds the message and tries again.
func (p *Pipeline) giveUp(d *Delivery, cause error) {
	var hold holding
	defer hold.set(p, 0, nil)
	for faults := 1; ; faults++ {
		err := p.deadLetter(d, cause)
		if err == nil {
			p.logger.ErrorContext(d.Trace(context.Background()), "message dead-lettered", "seq", d.Seq, "delivered", d.Delivered, "subject", p.cfg.DeadLetterSubject, "cause", cause)
			p.ack(d, outcomeDeadLettered)
			return
		}
		if !jsstore.IsUnavailable(err) {
			p.logger.ErrorContext(d.Trace(context.Background()), "dead-lettering failed; redelivering later", "seq", d.Seq, "err", err, "cause", cause)
			p.nak(d, p.cfg.Backoff.Delay(d.Delivered))
			return
		}
		p.m.faults.Inc()
		hold.set(p, 1, err)
		if !p.wait([]*Delivery{d}, p.cfg.FaultBackoff.Delay(faults)) {
			p.nak(d, handBackDelay)
			return
		}
	}
}

func (p *Pipeline) deadLetter(d *Delivery, cause error) (err error) {
	if p.cfg.DeadLetterSubject == "" {
		return fmt.Errorf("pipeline %s: no dead-letter subject: %w", p.cfg.Name, cause)
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("give-up panicked: %v", v)
		}
	}()
	if p.h.GiveUp != nil {
		ctx, cancel := context.WithTimeout(d.Trace(context.Background()), p.cfg.Timeout)
		err := p.h.GiveUp(ctx, d, cause)
		cancel()
		if err != nil {
			return fmt.Errorf("give up: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	// The dead letter's ID is its original's stream and sequence: a copy
	// sent again when the first goes unanswered is stored once.
	if err := jsstore.PublishAll(ctx, p.pub, []*nats.Msg{DeadLetter(d, p.cfg.DeadLetterSubject, cause)})[0].Err; err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	return nil
}

// Headers of a dead letter, beside the original's non-Nats headers.
const (
	// HeaderReason is the cause (watermill's poison queue names it so).
	HeaderReason = "reason_poisoned"
	// HeaderStream, HeaderSeq and HeaderSubject locate the original message.
	HeaderStream  = "Orderly-Stream"
	HeaderSeq     = "Orderly-Stream-Seq"
	HeaderSubject = "Orderly-Subject"
	// HeaderDelivered is how often the original was delivered.
	HeaderDelivered = "Orderly-Delivered"
)

// DeadLetter is the dead letter of d on subject: the payload, the headers
// without Nats-*, the cause and the original's place.
func DeadLetter(d *Delivery, subject string, cause error) *nats.Msg {
	h := make(nats.Header, len(d.Header)+6)
	for k, v := range d.Header {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			h[k] = v
		}
	}
	h.Set(HeaderReason, cause.Error())
	h.Set(HeaderStream, d.Stream)
	h.Set(HeaderSeq, strconv.FormatUint(d.Seq, 10))
	h.Set(HeaderSubject, d.Subject)
	h.Set(HeaderDelivered, strconv.Itoa(d.Delivered))
	h.Set(jetstream.MsgIDHeader, d.Stream+"."+strconv.FormatUint(d.Seq, 10))
	return &nats.Msg{Subject: subject, Header: h, Data: d.Data}
}

// wait waits delay while telling the server that the messages are in
// progress; false when the pipeline is closing.
func (p *Pipeline) wait(ds []*Delivery, delay time.Duration) bool {
	inProgress := func() {
		for _, d := range ds {
			_ = d.msg.InProgress()
		}
	}
	inProgress()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	tick := time.NewTicker(max(p.ackWait/3, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-timer.C:
			return true
		case <-tick.C:
			inProgress()
		case <-p.closing:
			return false
		}
	}
}

// Outcomes of a settled message: the values of orderly_pipeline_messages_total's
// outcome label.
const (
	outcomeAcked        = "acked"
	outcomeRetried      = "retried"
	outcomeDeadLettered = "dead_lettered"
)

// ack settles d for good: outcome acked or dead_lettered.
func (p *Pipeline) ack(d *Delivery, outcome string) {
	if d.settled.Swap(true) {
		return
	}
	// Counted before the ack is sent: whoever sees the ack on the server
	// (a consumer's ack floor) then finds it counted too.
	p.m.messages.WithLabelValues(outcome).Inc()
	// Not confirmed (no double ack): the ack follows the stored work, and a
	// lost ack is a redelivery that the idempotent handler turns into nothing
	// new. A confirmation would cost a reply per message for no guarantee.
	if err := d.msg.Ack(); err != nil {
		p.logger.Warn("ack failed; redelivered after the ack wait", "seq", d.Seq, "err", err)
	}
}

// nak hands d back for redelivery after delay: outcome retried.
func (p *Pipeline) nak(d *Delivery, delay time.Duration) {
	if d.settled.Swap(true) {
		return
	}
	p.m.messages.WithLabelValues(outcomeRetried).Inc() // before the nak, as in ack
	var err error
	if delay > 0 {
		err = d.msg.NakWithDelay(delay)
	} else {
		err = d.msg.Nak()
	}
	if err != nil {
		p.logger.Debug("nak failed; redelivered after the ack wait", "seq", d.Seq, "err", err)
	}
}

// holding tracks how many deliveries of one batch are held during a fault.
type holding struct{ n int }

// set makes n the number held (0 releases them); err is the fault.
func (h *holding) set(p *Pipeline, n int, err error) {
	delta := n - h.n
	if delta == 0 {
		return
	}
	h.n = n
	p.m.held.Add(float64(delta))
	switch now := p.held.Add(int64(delta)); {
	case now == int64(delta) && delta > 0:
		p.logger.Warn("NATS unavailable: holding messages and pausing consumption until it recovers", "err", err)
	case now == 0:
		p.logger.Info("NATS available again: consumption resumed")
	}
}

// isPermanent reports whether err is marked permanent: errors.As finds an
// error with Permanent() true.
func isPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

type metrics struct {
	batches  prometheus.Histogram
	messages *prometheus.CounterVec
	faults   prometheus.Counter
	held     prometheus.Gauge
	yielded  prometheus.Counter
}

// backlog reads the consumer's messages not yet acked: delivered and in
// flight, plus waiting; -1 when NATS cannot say (at scrape time, within 2 s).
func backlog(js jetstream.JetStream, stream, consumer string) func() float64 {
	return func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return -1
		}
		info := c.CachedInfo()
		return float64(info.NumPending) + float64(info.NumAckPending)
	}
}

func newMetrics(reg prometheus.Registerer, name string, backlog func() float64) (*metrics, error) {
	labels := prometheus.Labels{"pipeline": name}
	m := &metrics{
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "orderly_pipeline_batch_size", ConstLabels: labels,
			Help:    "Deliveries handled together in one attempt (1 for a handler without batches).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_pipeline_messages_total", ConstLabels: labels,
			Help: "Messages settled by a consumer pipeline, by outcome: acked, retried (naked for redelivery) or dead_lettered.",
		}, []string{"outcome"}),
		faults: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderly_pipeline_faults_total", ConstLabels: labels,
			Help: "Attempts that failed because NATS was unavailable (not counted against a message's deliveries).",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderly_pipeline_held", ConstLabels: labels,
			Help: "Messages held while NATS is unavailable; consumption pauses while any is held.",
		}),
		yielded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderly_pipeline_yielded_seconds_total", ConstLabels: labels,
			Help: "Time the pipeline fetched nothing to leave the cores to what fills its stream: it was behind, messages kept coming in, nobody waited, and its last message was younger than the lag it may trail by (serve --decision-lag; 0 when off).",
		}),
	}
	backlogGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "orderly_pipeline_backlog", ConstLabels: labels,
		Help: "Messages of the pipeline's durable consumer not acked yet (waiting and in flight), as NATS counts them at scrape time; -1 when NATS cannot say. Shared by every process of the role.",
	}, backlog)
	for _, c := range []prometheus.Collector{m.batches, m.messages, m.faults, m.held, m.yielded, backlogGauge} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Each outcome is exposed at 0 from the start: a series that appears at 1
	// shows Prometheus no increase, so the first dead letter would not fire
	// OrderlyDeadLetters.
	for _, outcome := range []string{outcomeAcked, outcomeRetried, outcomeDeadLettered} {
		m.messages.WithLabelValues(outcome)
	}
	return m, nil
}
