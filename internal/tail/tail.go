// Package tail prints the events of ORDER_EVENTS: the engine of
// `orderly events tail`.
package tail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/termsafe"
)

// Options say which events to print and how.
type Options struct {
	// Kind restricts the events to one kind; empty prints all.
	Kind events.Kind
	// Since prints events of the last Since; 0 prints every stored event.
	Since time.Duration
	// Last prints only the last Last of the matching events stored when Tail
	// starts (with Follow, the new ones after them); 0 prints them all. It
	// cannot be combined with Since.
	Last int
	// NewOnly prints only the events stored after Tail starts, as tail -n 0
	// does: with Follow the new ones, without it none. It cannot be combined
	// with Since or Last.
	NewOnly bool
	// Follow keeps printing new events until ctx ends.
	Follow bool
	// JSON prints each event as stored, one per line; otherwise a summary line.
	JSON bool
	// BySequence reads each event by its sequence instead of through a
	// consumer: what a user may do that may only read ORDER_EVENTS (the
	// events user, a service's own key), not create consumers on it.
	// Follow then asks for new events every 200 ms.
	BySequence bool
}

// Tail prints the matching events to w. Without Follow it returns once the
// events stored when it started are printed, also while new ones keep
// coming. It reads through an ordered consumer (ephemeral, no acks), so it
// never disturbs other consumers, and deletes it when it returns; or, with
// BySequence, by getting each message, which creates nothing. Once ctx
// ends it returns within a moment, also while NATS cannot make the
// consumer again (a cluster without a leader).
func Tail(ctx context.Context, js jetstream.JetStream, opts Options, w io.Writer) (int, error) {
	if opts.Last < 0 {
		return 0, fmt.Errorf("events: the number of last events must not be negative, got %d", opts.Last)
	}
	if opts.Last > 0 && opts.Since > 0 {
		return 0, errors.New("events: the last events and the events since a time cannot be combined")
	}
	if opts.NewOnly && (opts.Last > 0 || opts.Since > 0) {
		return 0, errors.New("events: only new events cannot be combined with the last events or the events since a time")
	}
	if opts.NewOnly && !opts.Follow {
		return 0, nil
	}
	out := &gate{w: w}
	done := make(chan error, 1)
	go func() { done <- read(ctx, js, opts, out) }()
	select {
	case err := <-done:
		return out.close(), err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return out.close(), err
	case <-time.After(stopGrace):
		// nats.go makes a lost consumer again under a lock that stopping
		// the iterator waits for, pausing up to 10 s between attempts
		// (docs/nats-facts.md, fact 17): the reader is left to end on its
		// own, and prints nothing more.
		return out.close(), ctx.Err()
	}
}

// stopGrace is how long Tail waits, once its context ends, for the reader to
// stop and delete its consumer: enough for a cluster that answers.
const stopGrace = 500 * time.Millisecond

// gate passes what the reader prints to w until Tail returns.
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	n      int
	closed bool
}

// errReturned ends a reader that Tail left.
var errReturned = errors.New("events: tail returned")

func (g *gate) print(data []byte, asJSON bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errReturned
	}
	if err := print(g.w, data, asJSON); err != nil {
		return err
	}
	g.n++
	return nil
}

// close stops the printing and returns how many events were printed.
func (g *gate) close() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return g.n
}

// ConsumerPrefix begins the name of every consumer a tail creates (each is
// deleted when the tail ends), so that `nats consumer ls ORDER_EVENTS`
// tells them from orderly's own.
const ConsumerPrefix = "orderly-tail-"

// read prints the matching events to out: Tail's work.
func read(ctx context.Context, js jetstream.JetStream, opts Options, out *gate) error {
	if opts.BySequence {
		return readBySequence(ctx, js, opts, out)
	}
	filter := filterOf(opts)
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy,
		NamePrefix: ConsumerPrefix + nuid.Next()}
	if opts.NewOnly {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	if opts.Since > 0 {
		start := time.Now().Add(-opts.Since)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	if opts.Last > 0 {
		start, err := startOfLast(ctx, js, filter, uint64(opts.Last))
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		if start > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
		}
	}
	cons, err := js.OrderedConsumer(ctx, events.EventStream, cfg)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	// The tool's user may delete its own consumers.
	defer jsstore.DeleteOrdered(js, events.EventStream, cons)
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	// The consumer counted the matching events stored when it was created:
	// the first skip of them are before the last Last, and without Follow
	// the rest are all Tail prints, however many come after them.
	stored, skip := info.NumPending, uint64(0)
	if opts.Last > 0 && stored > uint64(opts.Last) {
		skip = stored - uint64(opts.Last)
	}
	if stored == 0 && !opts.Follow {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var received uint64
	for {
		var m jetstream.Msg
		if opts.Follow {
			m, err = it.Next()
		} else {
			// Counted events that expire before they are delivered never
			// come: stop once the server has nothing left to deliver.
			var ok bool
			if m, ok, err = jsstore.NextPending(ctx, cons, it); err == nil && !ok {
				return nil
			}
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		received++
		if received > skip {
			if err := out.print(m.Data(), opts.JSON); err != nil {
				return err
			}
		}
		if opts.Follow {
			continue
		}
		// Events that expire while Tail reads are never delivered: no more
		// pending ends it too.
		if md, err := m.Metadata(); received >= stored || (err == nil && md.NumPending == 0) {
			return nil
		}
	}
}

// startOfLast finds a stream sequence from which at least n events match
// filter, or the stream's first sequence when fewer do; 0 when the stream is
// empty. It counts with short-lived consumers (the server counts the
// matching events from a sequence on, without delivering them), starting
// with the last n sequences and widening the window until it holds n.
func startOfLast(ctx context.Context, js jetstream.JetStream, filter string, n uint64) (uint64, error) {
	stream, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return 0, err
	}
	state := stream.CachedInfo().State
	if state.Msgs == 0 || state.LastSeq < state.FirstSeq {
		return 0, nil
	}
	for window := n; ; {
		start := state.FirstSeq
		if state.LastSeq-state.FirstSeq >= window {
			start = state.LastSeq - window + 1
		}
		if start == state.FirstSeq {
			return start, nil
		}
		matching, err := countFrom(ctx, stream, filter, start)
		if err != nil {
			return 0, err
		}
		if matching >= n {
			return start, nil
		}
		// Widen at least twofold, more when few of the window's events
		// match: to what their share suggests holds n, with a margin.
		grown := 16 * float64(window)
		if matching > 0 {
			grown = max(2*float64(window), 1.25*float64(window)*float64(n)/float64(matching))
		}
		window = state.LastSeq - state.FirstSeq + 1
		if grown < float64(window) {
			window = uint64(grown)
		}
	}
}

// countFrom counts the events matching filter from stream sequence start on.
func countFrom(ctx context.Context, stream jetstream.Stream, filter string, start uint64) (uint64, error) {
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Name: ConsumerPrefix + nuid.Next(), FilterSubject: filter, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return 0, err
	}
	info := cons.CachedInfo()
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := stream.DeleteConsumer(dctx, info.Name); err != nil {
		return 0, err
	}
	return info.NumPending, nil
}

// print writes an event, as stored or summed up, made safe for a terminal
// (termsafe): the stream is written by other processes. A stored event that
// is valid JSON stays valid, with the same values, on one line: it is
// compacted first (orderly stores events compact), so that every character
// termsafe escapes stands inside a string.
func print(w io.Writer, data []byte, asJSON bool) error {
	if asJSON {
		var compact bytes.Buffer
		if json.Compact(&compact, data) == nil {
			data = compact.Bytes()
		}
		_, err := fmt.Fprintln(w, termsafe.Bytes(data))
		return err
	}
	_, err := fmt.Fprintln(w, termsafe.String(Summary(data)))
	return err
}

// Summary is a one-line description of an encoded event.
func Summary(data []byte) string {
	var ev events.RawEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return "undecodable event: " + err.Error()
	}
	at := ev.Time.UTC().Format(time.RFC3339)
	switch ev.Type {
	case events.OrderCreatedType:
		var d events.OrderCreated
		if err := json.Unmarshal(ev.Data, &d); err == nil {
			return fmt.Sprintf("%s  created   %s  tenant=%s customer=%s total=%s items=%d",
				at, d.OrderID, d.Tenant, d.CustomerID, events.FormatAmount(d.Total, d.Currency), len(d.Items))
		}
	case events.OrderRejectedType:
		var d events.OrderRejected
		if err := json.Unmarshal(ev.Data, &d); err == nil {
			s := fmt.Sprintf("%s  rejected  %s  tenant=%s reason=%s", at, d.OrderID, d.Tenant, d.Reason)
			if d.DuplicateOf != "" {
				s += " duplicate_of=" + d.DuplicateOf
			}
			return s + " detail=" + fmt.Sprintf("%q", d.Detail)
		}
	}
	return fmt.Sprintf("%s  %s  %s", at, ev.Type, ev.Subject)
}

// ParseKind maps the flag value to a kind ("" for all).
func ParseKind(s string) (events.Kind, error) {
	switch strings.ToLower(s) {
	case "", "all":
		return "", nil
	case "created":
		return events.KindCreated, nil
	case "rejected":
		return events.KindRejected, nil
	}
	return "", fmt.Errorf("unknown event type %q: created, rejected or all", s)
}
