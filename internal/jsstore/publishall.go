package jsstore

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PubResult is the outcome of one message of PublishAll: the broker's ack, or
// the error PublishMsg would have returned for it.
type PubResult struct {
	Ack *jetstream.PubAck
	Err error
}

// BatchPublisher is a Publisher that sends several messages at once and
// waits for their acks once: a handler of a batch of deliveries pays one
// wait for all its writes instead of a round trip each (ADR 0011).
type BatchPublisher interface {
	Publisher
	PublishMsgs(ctx context.Context, msgs []*nats.Msg) []PubResult
}

// PublishAll publishes msgs through pub and returns their outcomes in
// order: all at once when pub is a BatchPublisher, else each on a goroutine
// of its own (a Batcher groups concurrent calls into atomic batches).
func PublishAll(ctx context.Context, pub Publisher, msgs []*nats.Msg) []PubResult {
	if bp, ok := pub.(BatchPublisher); ok {
		return bp.PublishMsgs(ctx, msgs)
	}
	res := make([]PubResult, len(msgs))
	if len(msgs) == 1 {
		res[0].Ack, res[0].Err = pub.PublishMsg(ctx, msgs[0])
		return res
	}
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { res[i].Ack, res[i].Err = pub.PublishMsg(ctx, m) })
	}
	wg.Wait()
	return res
}

// PublishMsgs sends every message with nats.go's asynchronous publish and
// then waits for the acks, until ctx ends (the messages still unanswered then
// fail with ctx's error: like a timed-out PublishMsg, they may be stored). A
// message the client does not take (too many acks pending) goes through
// PublishMsg. Errors are those of PublishMsg: a no-responders answer is
// retried by nats.go as by PublishMsg, an API error comes back as a
// *jetstream.APIError.
func (f fastPublish) PublishMsgs(ctx context.Context, msgs []*nats.Msg) []PubResult {
	res := make([]PubResult, len(msgs))
	if len(msgs) == 1 {
		res[0].Ack, res[0].Err = f.PublishMsg(ctx, msgs[0])
		return res
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	var direct []int
	for i, m := range msgs {
		fut, err := f.JetStream.PublishMsgAsync(m)
		if err != nil {
			direct = append(direct, i)
			continue
		}
		futures[i] = fut
	}
	for i, fut := range futures {
		if fut == nil {
			continue
		}
		select {
		case ack := <-fut.Ok():
			res[i].Ack = ack
		case err := <-fut.Err():
			res[i].Err = err
		case <-ctx.Done():
			res[i].Err = ctx.Err()
		}
	}
	for _, i := range direct {
		res[i].Ack, res[i].Err = f.PublishMsg(ctx, msgs[i])
	}
	return res
}

// PublishMsgs refuses every message when the free space is below the
// threshold, as PublishMsg does, and else publishes them all through the
// guarded publisher.
func (p guarded) PublishMsgs(ctx context.Context, msgs []*nats.Msg) []PubResult {
	for _, m := range msgs {
		if err := p.admit(m); err != nil {
			res := make([]PubResult, len(msgs))
			for i := range res {
				res[i].Err = err
			}
			return res
		}
	}
	return PublishAll(ctx, p.pub, msgs)
}

// PublishMsgs publishes through the followed publisher and records each
// outcome.
func (f followed) PublishMsgs(ctx context.Context, msgs []*nats.Msg) []PubResult {
	res := PublishAll(ctx, f.pub, msgs)
	for _, r := range res {
		f.h.record(r.Err)
	}
	return res
}

var (
	_ BatchPublisher = fastPublish{}
	_ BatchPublisher = guarded{}
	_ BatchPublisher = followed{}
)
