// Package processor turns CreateOrder commands into order events. It runs as a
// watermill router on the durable consumer "processor" of ORDER_COMMANDS; any
// number of instances may share that consumer.
//
// One key, one order: before it decides, the processor claims the command's
// hashed idempotency key in ORDER_RESULTS with an atomic create (first writer
// wins). A command whose key is held by another order becomes an OrderRejected
// that names the holder (reason duplicate or idempotency_key_reused) and never an
// OrderCreated. This holds after the broker's duplicate window has passed, after
// restarts, and with several processors.
//
// One order, one event: the event is stored with a deterministic Nats-Msg-Id and
// an expected last sequence of 0 on the order's event subjects, so a redelivered
// command cannot store a second event. The command is acked only after the event
// is stored.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/natsx"
	"github.com/orderly-dev/orderly/internal/wm"
)

// Config configures a processor.
type Config struct {
	// Concurrency is how many commands one instance handles at once.
	Concurrency int
	// AckWait is the consumer's ack wait (natsx.Topology.AckWait); a command
	// handled longer is redelivered.
	AckWait time.Duration
	// MaxDeliver is the consumer's delivery limit (natsx.Topology.MaxDeliver);
	// the last delivery of a failing command dead-letters it.
	MaxDeliver int
	// Timeout bounds the NATS calls of one delivery.
	Timeout time.Duration
	// Hooks inject faults in tests; nil in production.
	Hooks Hooks
}

// DefaultConfig is the configuration of the standalone processor.
func DefaultConfig() Config {
	return Config{Concurrency: 32, AckWait: 10 * time.Second, MaxDeliver: 10, Timeout: 5 * time.Second}
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("processor concurrency must be at least 1, got %d", c.Concurrency))
	}
	if c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("processor ack wait must be at least 1s, got %s", c.AckWait))
	}
	if c.MaxDeliver < 2 {
		errs = append(errs, fmt.Errorf("processor max deliver must be at least 2, got %d", c.MaxDeliver))
	}
	if c.Timeout <= 0 || c.Timeout > c.AckWait {
		errs = append(errs, fmt.Errorf("processor timeout must be positive and at most the ack wait, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// Processor is a running watermill router over the processor consumer.
type Processor struct {
	router  *message.Router
	handler *createOrderHandler
	workers *wm.Workers
}

// New builds a processor that consumes through js and stores its events
// through pub (js itself, or a batcher on ORDER_EVENTS).
func New(cfg Config, js jetstream.JetStream, pub natsx.Publisher, claims Claims, logger *slog.Logger) (*Processor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger = logger.With("component", "processor")
	wlog := wm.Logger(logger)
	sub, err := wm.NewSubscriber(js, wm.SubscriberConfig{
		Stream:       events.CommandStream,
		Consumer:     natsx.ProcessorConsumer,
		Concurrency:  cfg.Concurrency,
		Prefetch:     2 * cfg.Concurrency,
		Backoff:      wm.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second},
		CloseTimeout: cfg.AckWait,
	}, logger)
	if err != nil {
		return nil, err
	}
	h, err := NewCreateOrderHandler(claims, JetStreamEvents{Pub: pub}, cfg.MaxDeliver, cfg.Timeout, logger)
	if err != nil {
		return nil, err
	}
	h.hooks = cfg.Hooks
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.AckWait}, wlog)
	if err != nil {
		return nil, err
	}
	dlqPub, err := wmjs.NewPublisher(wmjs.PublisherConfig{Conn: js.Conn(), Logger: wlog})
	if err != nil {
		return nil, err
	}
	poison, err := middleware.PoisonQueueWithFilter(dlqPub, events.DeadLetterSubject, IsPermanent)
	if err != nil {
		return nil, err
	}
	workers := wm.NewWorkers(cfg.Concurrency)
	router.AddMiddleware(middleware.Recoverer, poison, workers.Middleware)
	router.AddConsumerHandler("create-order", events.CommandStream, sub, h.Handle)
	return &Processor{router: router, handler: h, workers: workers}, nil
}

// OnDecided sets a callback run after each stored decision (for metrics).
func (p *Processor) OnDecided(f func(kind events.Kind, reason string)) { p.handler.decided = f }

// Run runs the router until Close. It returns once the router stopped.
func (p *Processor) Run(ctx context.Context) error { return p.router.Run(ctx) }

// Running is closed when the router runs.
func (p *Processor) Running() <-chan struct{} { return p.router.Running() }

// Close stops taking commands and waits (up to the ack wait) for those in flight.
func (p *Processor) Close() error {
	err := p.router.Close()
	p.workers.Stop()
	return err
}

// JetStreamEvents is the EventStore on ORDER_EVENTS, written through Pub (a
// jetstream.JetStream or a natsx.Batcher).
type JetStreamEvents struct{ Pub natsx.Publisher }

// Append stores the event with Nats-Msg-Id = its event ID and an expected last
// sequence of 0 on all subjects of the order; a refusal because the order
// already has an event means the work is done.
func (s JetStreamEvents) Append(ctx context.Context, k events.Kind, orderID string, data []byte) error {
	msg := &nats.Msg{
		Subject: events.EventSubject(k, orderID),
		Header:  nats.Header{"Content-Type": []string{events.ContentType}},
		Data:    data,
	}
	natsx.SetMsgID(msg, events.EventID(k, orderID))
	natsx.SetExpectLastSubjectSeq(msg, 0, events.OrderSubjects(orderID))
	_, err := s.Pub.PublishMsg(ctx, msg)
	if natsx.IsWrongLastSequence(err) {
		return nil
	}
	return err
}
