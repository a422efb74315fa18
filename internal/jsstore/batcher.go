package jsstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Atomic batch headers (nats-server 2.12+, streams with AllowAtomicPublish).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// MaxBatch is the largest atomic batch a Batcher sends (the server allows 1000).
const MaxBatch = 256

// Batcher groups the messages that concurrent callers publish to one stream
// into atomic batches: the server stores a batch with one commit, and with
// sync_interval always with one fsync instead of one per message (group
// commit). A caller waits for its own message's ack, exactly as with a plain
// publish: the message is stored when PublishMsg returns nil.
//
// A batch fails whole when one message breaks a condition (a duplicate
// message ID, a wrong expected sequence); the Batcher then publishes that
// batch's messages one by one, so that each caller gets its own answer, such as
// a duplicate ack or a wrong-last-sequence error. The stream must allow atomic
// publish (Topology.Ensure turns it on).
type Batcher struct {
	js      jetstream.JetStream
	queue   chan *batchItem
	stop    chan struct{}
	wg      sync.WaitGroup
	prefix  string
	counter atomic.Uint64
	timeout time.Duration
	batches atomic.Uint64
	msgs    atomic.Uint64
}

type batchItem struct {
	ctx  context.Context
	msg  *nats.Msg
	ack  *jetstream.PubAck
	err  error
	done chan struct{}
}

// NewBatcher starts flushers goroutines that send batches on js. timeout
// bounds one batch's commit (which is waited for only as long as its
// callers wait).
func NewBatcher(js jetstream.JetStream, flushers int, timeout time.Duration) *Batcher {
	b := &Batcher{
		js: js, queue: make(chan *batchItem, 4*MaxBatch), stop: make(chan struct{}),
		prefix: nuid.Next() + ".", timeout: timeout,
	}
	for i := 0; i < flushers; i++ {
		b.wg.Add(1)
		go b.flush()
	}
	return b
}

// PublishMsg queues msg for the next batch and waits for its ack. opts are
// not supported: set conditions as headers.
func (b *Batcher) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if len(opts) > 0 {
		return nil, errors.New("batcher: publish options are not supported; set headers")
	}
	it := &batchItem{ctx: ctx, msg: msg, done: make(chan struct{})}
	select {
	case b.queue <- it:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.stop:
		return nil, errors.New("batcher stopped")
	}
	select {
	case <-it.done:
		return it.ack, it.err
	case <-ctx.Done():
		// The message may still be stored: like a plain publish that timed out.
		return nil, ctx.Err()
	}
}

// Stats returns how many batches and messages were sent.
func (b *Batcher) Stats() (batches, msgs uint64) { return b.batches.Load(), b.msgs.Load() }

// Stop ends the flushers after the queued messages are sent.
func (b *Batcher) Stop() {
	close(b.stop)
	b.wg.Wait()
}

func (b *Batcher) flush() {
	defer b.wg.Done()
	items := make([]*batchItem, 0, MaxBatch)
	for {
		var first *batchItem
		select {
		case first = <-b.queue:
		case <-b.stop:
			for { // answer what is still queued
				select {
				case it := <-b.queue:
					b.send([]*batchItem{it})
				default:
					return
				}
			}
		}
		items = append(items[:0], first)
	fill: // whatever queued up while the last batch was in flight
		for len(items) < MaxBatch {
			select {
			case it := <-b.queue:
				items = append(items, it)
			default:
				break fill
			}
		}
		b.send(items)
	}
}

func (b *Batcher) send(items []*batchItem) {
	live := items[:0]
	for _, it := range items {
		if err := it.ctx.Err(); err != nil { // the caller gave up before it was sent
			it.err = err
			close(it.done)
			continue
		}
		live = append(live, it)
	}
	for _, group := range oneConditionEach(live) {
		b.sendBatch(group)
	}
}

// oneConditionEach splits items, in order, into groups in which no two
// messages have a condition on the same subject or subject filter. Inside an
// atomic batch the server checks every condition against the stream as it
// was before the batch, and a filter does not see the batch's own messages:
// two messages expecting "nothing under this filter yet" would both be
// stored (docs/nats-facts.md, fact 13). Sent one group after the other, the
// later one sees the earlier one's messages. Almost always there is one
// group.
func oneConditionEach(items []*batchItem) [][]*batchItem {
	var groups [][]*batchItem
	times := map[string]int{} // the n-th message with a condition goes to group n
	for _, it := range items {
		g := 0
		if c := conditionOn(it.msg); c != "" {
			g = times[c]
			times[c]++
		}
		if g == len(groups) {
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], it)
	}
	return groups
}

// conditionOn is what msg's expected last subject sequence is checked on:
// its subject filter, or its subject; empty without such a condition.
func conditionOn(msg *nats.Msg) string {
	if msg.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "" {
		return ""
	}
	if f := msg.Header.Get(jetstream.ExpectedLastSubjSeqSubjHeader); f != "" {
		return f
	}
	return msg.Subject
}

// sendBatch sends live as one atomic batch (one message: a plain publish).
func (b *Batcher) sendBatch(live []*batchItem) {
	switch len(live) {
	case 0:
		return
	case 1:
		b.one(live[0])
		return
	}
	b.batches.Add(1)
	b.msgs.Add(uint64(len(live)))
	ctx, cancel := context.WithDeadline(context.Background(), waitedFor(live, b.timeout))
	defer cancel()
	ack, err := b.commit(ctx, live)
	if err == nil {
		last := ack.Sequence
		for i, it := range live {
			it.ack = &jetstream.PubAck{Stream: ack.Stream, Sequence: last - uint64(len(live)-1-i), Domain: ack.Domain}
			close(it.done)
		}
		return
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		for _, it := range live { // the batch may or may not be stored: like a timed-out publish
			it.err = err
			close(it.done)
		}
		return
	}
	// A condition failed somewhere in the batch: publish one by one, pipelined,
	// so that each caller gets its own answer.
	var wg sync.WaitGroup
	for _, it := range live {
		wg.Add(1)
		go func() { defer wg.Done(); b.one(it) }()
	}
	wg.Wait()
}

// waitedFor is how long a batch's commit is waited for: as long as the last
// of its callers waits, within timeout. A commit that no one answers (sent
// to a stream leader that hangs, nats-facts 23) holds its flusher no longer
// than its callers, who send again.
func waitedFor(items []*batchItem, timeout time.Duration) time.Time {
	limit := time.Now().Add(timeout)
	var last time.Time
	for _, it := range items {
		d, ok := it.ctx.Deadline()
		if !ok || !d.Before(limit) {
			return limit
		}
		if d.After(last) {
			last = d
		}
	}
	return last
}

func (b *Batcher) one(it *batchItem) {
	it.ack, it.err = b.js.PublishMsg(it.ctx, it.msg)
	close(it.done)
}

// commit sends items as one atomic batch: all but the last without a reply,
// the last with the commit header, answered by the batch's ack.
func (b *Batcher) commit(ctx context.Context, items []*batchItem) (*jetstream.PubAck, error) {
	nc := b.js.Conn()
	id := b.prefix + strconv.FormatUint(b.counter.Add(1), 36)
	for i, it := range items {
		m := &nats.Msg{Subject: it.msg.Subject, Data: it.msg.Data, Header: make(nats.Header, len(it.msg.Header)+3)}
		for k, v := range it.msg.Header {
			m.Header[k] = v
		}
		m.Header.Set(batchIDHeader, id)
		m.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i < len(items)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return nil, err
			}
			continue
		}
		m.Header.Set(batchCommitHeader, "1")
		ack, err := b.js.PublishMsg(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("atomic batch of %d: %w", len(items), err)
		}
		return ack, nil
	}
	return nil, errors.New("empty batch")
}
