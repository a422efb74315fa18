package tail

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
)

// pollInterval is how often a tail that reads by sequence asks for new
// events once it has printed every stored one (Follow), and waits before it
// asks again after a failed read.
const pollInterval = 200 * time.Millisecond

// readBySequence is read for a user that may only read ORDER_EVENTS's
// messages by sequence and subject (the events user, a service's own key):
// each event is one get of the next message that matches the filter, and
// Follow polls for the next one. It creates nothing on the server.
func readBySequence(ctx context.Context, js jetstream.JetStream, opts Options, out *gate) error {
	filter := filterOf(opts)
	stream, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	state := stream.CachedInfo().State
	// Without Follow, the events stored when Tail started are all it prints.
	end := state.LastSeq
	next := state.FirstSeq
	switch {
	case opts.NewOnly:
		next = end + 1
	case opts.Since > 0:
		if next, err = firstSince(ctx, stream, state, time.Now().Add(-opts.Since)); err != nil {
			return fmt.Errorf("events: %w", err)
		}
	case opts.Last > 0:
		if next, err = startOfLastBySequence(ctx, stream, filter, state, opts.Last); err != nil {
			return fmt.Errorf("events: %w", err)
		}
	}
	for {
		m, err := stream.GetMsg(ctx, max(next, 1), jetstream.WithGetMsgSubject(filter))
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && (opts.Follow || m.Sequence <= end):
			if err := out.print(m.Data, opts.JSON); err != nil {
				return err
			}
			next = m.Sequence + 1
			continue
		case !opts.Follow && (err == nil || errors.Is(err, jetstream.ErrMsgNotFound)):
			return nil // nothing left of what was stored at the start
		case !opts.Follow:
			return fmt.Errorf("events: %w", err)
		}
		// Following: no new event yet, or NATS did not answer (an outage,
		// a new leader); ask again in a moment.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// filterOf is the subject filter of the events opts asks for.
func filterOf(opts Options) string {
	if opts.Kind != "" {
		return events.KindSubjects(opts.Kind)
	}
	return events.EventSubjects
}

// firstSince is the sequence of the first event stored at or after since
// (past the last one when there is none): a binary search over the stored
// events' times, which grow with their sequences.
func firstSince(ctx context.Context, stream jetstream.Stream, state jetstream.StreamState, since time.Time) (uint64, error) {
	lo, hi := state.FirstSeq, state.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := stream.GetMsg(ctx, max(mid, 1), jetstream.WithGetMsgSubject(events.EventSubjects))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			hi = mid // nothing stored from mid on
		case err != nil:
			return 0, err
		case m.Time.Before(since):
			lo = m.Sequence + 1
		default:
			hi = mid
		}
	}
	return lo, nil
}

// startOfLastBySequence is the sequence of the n-th last event matching
// filter among those stored in state (the first stored sequence when fewer
// match). It reads windows of sequences backwards from the end, each twice
// as long as the one after it, getting only the matching events of each,
// until n are found.
func startOfLastBySequence(ctx context.Context, stream jetstream.Stream, filter string, state jetstream.StreamState, n int) (uint64, error) {
	if state.Msgs == 0 || state.LastSeq < state.FirstSeq {
		return state.LastSeq + 1, nil
	}
	found := 0 // matching events from hi on
	hi := state.LastSeq + 1
	for window := uint64(n); hi > state.FirstSeq; window *= 2 {
		lo := state.FirstSeq
		if hi-state.FirstSeq > window {
			lo = hi - window
		}
		// The sequences of the window's matching events, in order.
		var seqs []uint64
		for seq := lo; seq < hi; {
			m, err := stream.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(filter))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return 0, err
			}
			if m.Sequence >= hi {
				break
			}
			seqs = append(seqs, m.Sequence)
			seq = m.Sequence + 1
		}
		if found+len(seqs) >= n {
			return seqs[len(seqs)-(n-found)], nil
		}
		found += len(seqs)
		hi = lo
	}
	return state.FirstSeq, nil
}
