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
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/termsafe"
)

// Options say which events to print and how.
type Options struct {
	// Kind restricts the events to one kind; empty prints all.
	Kind events.Kind
	// Since prints events of the last Since; 0 prints every stored event.
	Since time.Duration
	// Follow keeps printing new events until ctx ends.
	Follow bool
	// JSON prints each event as stored, one per line; otherwise a summary line.
	JSON bool
}

// Tail prints the matching events to w. Without Follow it returns once the
// events stored when it started are printed. It reads through an ordered
// consumer (ephemeral, no acks), so it never disturbs other consumers.
func Tail(ctx context.Context, js jetstream.JetStream, opts Options, w io.Writer) (int, error) {
	filter := events.EventSubjects
	if opts.Kind != "" {
		filter = events.KindSubjects(opts.Kind)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if opts.Since > 0 {
		start := time.Now().Add(-opts.Since)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, err := js.OrderedConsumer(ctx, events.EventStream, cfg)
	if err != nil {
		return 0, fmt.Errorf("events: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("events: %w", err)
	}
	if info.NumPending == 0 && !opts.Follow {
		return 0, nil
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	n := 0
	for {
		m, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return n, ctx.Err()
		}
		if err != nil {
			return n, err
		}
		if err := print(w, m.Data(), opts.JSON); err != nil {
			return n, err
		}
		n++
		if md, err := m.Metadata(); err == nil && md.NumPending == 0 && !opts.Follow {
			return n, nil
		}
	}
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
			return fmt.Sprintf("%s  created   %s  tenant=%s customer=%s total=%s %s items=%d",
				at, d.OrderID, d.Tenant, d.CustomerID, money(d.Total), d.Currency, len(d.Items))
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

// money prints minor units with two decimals, the common case.
func money(minor int64) string {
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s%d.%02d", sign, minor/100, minor%100)
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
