// Package wm binds watermill routers to orderly's durable JetStream consumers.
//
// watermill-nats' pkg/jetstream subscriber hands one message at a time to the
// router per subscription and does not create durable consumers on its own (its
// default consumer is deleted when it goes idle). This package gives it an
// initializer that binds to a durable consumer created by natsx.Topology.Ensure,
// an unmarshaler that keeps the JetStream metadata (stream sequence, delivery
// count) in the watermill metadata, and opens Concurrency subscriptions on that
// one consumer so that Concurrency messages are in flight at once.
//
// The ack contract: the subscriber acks a message (and waits for the server to
// confirm: DoubleAck) only after the handler returned nil. A handler error naks
// it; a handler that outlives AckWait, or a message in flight at shutdown, is
// neither acked nor naked, and the server redelivers it after AckWait. Nothing
// is acked that was not handled.
package wm

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Metadata keys set by the unmarshaler.
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

// StreamSeq returns the stream sequence of msg.
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

// SubscriberConfig configures a subscriber bound to a durable consumer.
type SubscriberConfig struct {
	// Stream and Consumer name the durable consumer (it must exist).
	Stream, Consumer string
	// AckWait is how long the subscriber waits for the handler before it gives the
	// message up to redelivery; keep it at or below the consumer's AckWait.
	AckWait time.Duration
	// NakDelay spaces redeliveries after handler errors.
	NakDelay wmjs.Delay
	// Prefetch is how many messages each subscription buffers.
	Prefetch int
}

// NewSubscriber returns a watermill subscriber on its own connection nc (closing
// the subscriber drains nc).
func NewSubscriber(nc *nats.Conn, cfg SubscriberConfig, logger watermill.LoggerAdapter) (*wmjs.Subscriber, error) {
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = 64
	}
	return wmjs.NewSubscriber(wmjs.SubscriberConfig{
		Conn:           nc,
		Logger:         logger,
		AckWaitTimeout: cfg.AckWait,
		NakDelay:       cfg.NakDelay,
		ResourceInitializer: func(ctx context.Context, js jetstream.JetStream, _ string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
			c, err := js.Consumer(ctx, cfg.Stream, cfg.Consumer)
			if err != nil {
				return nil, nil, fmt.Errorf("durable consumer %s on %s: %w", cfg.Consumer, cfg.Stream, err)
			}
			return c, nil, nil
		},
		ConsumeOptions: []jetstream.PullConsumeOpt{
			jetstream.PullMaxMessages(cfg.Prefetch),
		},
		Unmarshaler: unmarshaler{},
	})
}

// unmarshaler keeps the payload as is and the JetStream metadata in the
// watermill metadata. It never fails: watermill-nats dereferences the message
// even when the unmarshaler returns an error.
type unmarshaler struct{}

func (unmarshaler) Unmarshal(msg jetstream.Msg) (*message.Message, error) {
	md := make(message.Metadata, 4)
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			md[k] = v[0]
		}
	}
	md[MetaSubject] = msg.Subject()
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	if meta, err := msg.Metadata(); err == nil {
		md[MetaStreamSeq] = strconv.FormatUint(meta.Sequence.Stream, 10)
		md[MetaDelivered] = strconv.FormatUint(meta.NumDelivered, 10)
		if id == "" {
			id = meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
	}
	m := message.NewMessage(id, msg.Data())
	m.Metadata = md
	return m, nil
}

// AddHandlers adds concurrency handlers named name-0 ... that all consume from
// sub with h. Each handler is one subscription on the same durable consumer.
func AddHandlers(r *message.Router, name, topic string, sub message.Subscriber, concurrency int, h message.NoPublishHandlerFunc) {
	if concurrency < 1 {
		concurrency = 1
	}
	for i := 0; i < concurrency; i++ {
		r.AddConsumerHandler(fmt.Sprintf("%s-%d", name, i), topic, sub, h)
	}
}

// Backoff spaces redeliveries after handler errors: Base after the first
// delivery, doubling up to Max.
type Backoff struct{ Base, Max time.Duration }

// WaitTime implements watermill-nats' Delay. It never terminates a message: the
// handler decides when to give up (and dead-letters it).
func (b Backoff) WaitTime(delivered uint64) time.Duration {
	d := b.Base
	for i := uint64(1); i < delivered && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}
