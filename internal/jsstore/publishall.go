package jsstore

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderly-dev/orderly/internal/attempt"
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
// of its own (a Batcher groups concurrent calls into atomic batches). Either
// way a message whose ack has not come within an attempt is sent again, as
// PublishMsgs does.
func PublishAll(ctx context.Context, pub Publisher, msgs []*nats.Msg) []PubResult {
	if bp, ok := pub.(BatchPublisher); ok {
		return bp.PublishMsgs(ctx, msgs)
	}
	res := make([]PubResult, len(msgs))
	if len(msgs) == 1 {
		res[0] = publishAgain(ctx, pub, msgs[0])
		return res
	}
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { res[i] = publishAgain(ctx, pub, m) })
	}
	wg.Wait()
	return res
}

// publishAgain publishes m through pub, and again whenever an attempt
// (attempt.Timeout) ends unanswered, until ctx ends: a write lost in a
// stream leader's failure (nats-facts 23) reaches the new leader soon after
// its election instead of waiting out ctx. Unlike PublishMsgs it cannot
// hear a copy's answer after its attempt, so a copy that answers late and
// a later copy's refusal (a duplicate, a broken condition) say "refused"
// where the message was stored: its callers read what is stored then, as
// after a redelivery (the processor's claims and events do). Through a
// Batcher, a copy still queued when its attempt ends is never sent. Without
// a deadline on ctx it publishes once, bounded by pub alone.
func publishAgain(ctx context.Context, pub Publisher, m *nats.Msg) PubResult {
	if _, ok := ctx.Deadline(); !ok {
		ack, err := pub.PublishMsg(ctx, m)
		return PubResult{Ack: ack, Err: err}
	}
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, attempt.Timeout(n))
		ack, err := pub.PublishMsg(actx, m)
		lost := err != nil && actx.Err() != nil && ctx.Err() == nil
		cancel()
		if !lost {
			return PubResult{Ack: ack, Err: err}
		}
	}
}

// PublishMsgs sends every message with nats.go's asynchronous publish and
// then waits for the acks, until ctx ends (the messages still unanswered then
// fail with ctx's error: like a timed-out PublishMsg, they may be stored). A
// message the client does not take (too many acks pending) goes through
// PublishMsg. Errors are those of PublishMsg: a no-responders answer is
// retried by nats.go as by PublishMsg, an API error comes back as a
// *jetstream.APIError.
//
// A message whose ack has not come within an attempt (attempt.Timeout: a
// second, a second longer each time, at most three, as the API's calls) is
// sent again: one sent into a stream
// leader's failure is lost without an answer, and a second copy reaches the
// new leader once it is elected, instead of waiting out ctx (nats-facts 23).
// The copies carry the message's ID and condition, so a second copy of a
// stored message is a duplicate or a broken condition, never a second
// record. Whichever copy answers first is the message's answer; a later
// copy's refusal gives way to an earlier copy's ack (its answer comes
// first, on the same subscription).
func (f fastPublish) PublishMsgs(ctx context.Context, msgs []*nats.Msg) []PubResult {
	res := make([]PubResult, len(msgs))
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	first := make([]jetstream.PubAckFuture, len(msgs))
	var again [][]jetstream.PubAckFuture // the copies of messages sent again, oldest first
	idx := make([]int, len(msgs))        // the messages of this attempt
	for i := range idx {
		idx[i] = i
	}
	var direct []int
	for n := 1; len(idx) > 0; n++ {
		sent := idx[:0]
		for _, i := range idx {
			fut, err := f.JetStream.PublishMsgAsync(msgs[i])
			switch {
			case err != nil:
				direct = append(direct, i)
				continue
			case n == 1:
				first[i] = fut
			default:
				if again == nil {
					again = make([][]jetstream.PubAckFuture, len(msgs))
				}
				if again[i] == nil {
					again[i] = []jetstream.PubAckFuture{first[i]}
				}
				again[i] = append(again[i], fut)
			}
			sent = append(sent, i)
		}
		actx, cancel := context.WithTimeout(ctx, attempt.Timeout(n))
		idx = sent[:0]
		for _, i := range sent {
			copies := first[i : i+1]
			if again != nil && again[i] != nil {
				copies = again[i]
			}
			r, answered := awaitCopies(actx, copies)
			switch {
			case answered:
				res[i] = r
			case ctx.Err() != nil:
				res[i].Err = ctx.Err()
			default:
				idx = append(idx, i) // its attempt ended: send it again
			}
		}
		cancel()
	}
	for _, i := range direct {
		res[i].Ack, res[i].Err = f.PublishMsg(ctx, msgs[i])
	}
	return res
}

// awaitCopies waits, until ctx ends, for the answer to the last copy sent of
// a message, or an ack of its first; false when neither comes. A refusal of
// a later copy (a duplicate, a broken condition) is the ack of an earlier
// one when that has come.
func awaitCopies(ctx context.Context, copies []jetstream.PubAckFuture) (PubResult, bool) {
	last := copies[len(copies)-1]
	var firstOk <-chan *jetstream.PubAck
	var firstErr <-chan error
	if len(copies) > 1 {
		firstOk, firstErr = copies[0].Ok(), copies[0].Err()
	}
	for {
		select {
		case ack := <-last.Ok():
			if ack.Duplicate {
				if earlier, ok := earlierAck(copies); ok {
					return PubResult{Ack: earlier}, true
				}
			}
			return PubResult{Ack: ack}, true
		case err := <-last.Err():
			if IsWrongLastSequence(err) {
				if earlier, ok := earlierAck(copies); ok {
					return PubResult{Ack: earlier}, true
				}
			}
			return PubResult{Err: err}, true
		case ack := <-firstOk:
			return PubResult{Ack: ack}, true
		case <-firstErr:
			firstOk, firstErr = nil, nil // the last copy may yet be stored
		case <-ctx.Done():
			return PubResult{}, false
		}
	}
}

// earlierAck is the ack of a copy before the last, if one has come.
func earlierAck(copies []jetstream.PubAckFuture) (*jetstream.PubAck, bool) {
	for _, c := range copies[:len(copies)-1] {
		select {
		case ack := <-c.Ok():
			return ack, true
		default:
		}
	}
	return nil, false
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
