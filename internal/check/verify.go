package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/bench"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// storedEvent is what the checker needs from an event.
type storedEvent struct {
	Type        string
	OrderID     string
	KeyHash     string
	Fingerprint string
	Reason      string
	HoldsKey    bool
}

// pingEvents checks that ORDER_EVENTS can be read at url.
func pingEvents(ctx context.Context, cfg Config) error {
	js, err := jsstore.DialJetStream(cfg.NATSURL, cfg.NATSCredentials, "orderly-check")
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	_, err = js.Stream(ctx, events.EventStream)
	return jsstore.WithDenied(err, js.Conn())
}

// readEventsPatiently is readEvents made again, from the start, every 2 s
// while it fails, for at most patience: right after a restart of the whole
// cluster a node can leave a JetStream request unanswered (nats.go's 5 s
// timeout) although the streams have their leaders again, which once ended
// a run's verification (TestWholeClusterRestartUnderCheck). Each failure
// is written to cfg.Progress; the last one is returned.
func readEventsPatiently(ctx context.Context, cfg Config, since time.Time, customer string, patience time.Duration) ([]storedEvent, error) {
	giveUp := time.Now().Add(patience)
	for {
		evs, err := readEvents(ctx, cfg, since, customer)
		if err == nil || ctx.Err() != nil || time.Now().Add(2*time.Second).After(giveUp) {
			return evs, err
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "reading ORDER_EVENTS: %v; again in 2 s\n", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// readEvents reads the events stored since start whose customer is this run's.
func readEvents(ctx context.Context, cfg Config, since time.Time, customer string) ([]storedEvent, error) {
	js, err := jsstore.DialJetStream(cfg.NATSURL, cfg.NATSCredentials, "orderly-check")
	if err != nil {
		return nil, err
	}
	defer js.Conn().Close()
	cons, err := js.OrderedConsumer(ctx, events.EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubjects}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since,
	})
	if err != nil {
		return nil, err
	}
	defer jsstore.DeleteOrdered(js, events.EventStream, cons)
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []storedEvent
	if info.NumPending == 0 {
		return out, nil
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			return nil, err
		}
		var ev events.RawEvent
		if err := json.Unmarshal(m.Data(), &ev); err == nil {
			switch ev.Type {
			case events.OrderCreatedType:
				var d events.OrderCreated
				if json.Unmarshal(ev.Data, &d) == nil && d.CustomerID == customer {
					out = append(out, storedEvent{Type: ev.Type, OrderID: d.OrderID, KeyHash: d.IdempotencyKeyHash, Fingerprint: d.RequestFingerprint, HoldsKey: true})
				}
			case events.OrderRejectedType:
				var d events.OrderRejected
				if json.Unmarshal(ev.Data, &d) == nil && d.Request.CustomerID == customer {
					out = append(out, storedEvent{Type: ev.Type, OrderID: d.OrderID, KeyHash: d.IdempotencyKeyHash, Fingerprint: d.RequestFingerprint, Reason: d.Reason, HoldsKey: d.HoldsKey()})
				}
			}
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// Violation is one broken promise.
type Violation struct {
	Rule   string `json:"rule"`
	Key    string `json:"key,omitempty"`
	Detail string `json:"detail"`
}

// Report is the outcome of a check run.
type Report struct {
	Seconds    float64           `json:"seconds"`
	Orders     int               `json:"orders"`
	Scenarios  map[string]int    `json:"scenarios"`
	Requests   int               `json:"requests"`
	Outcomes   map[string]int    `json:"outcomes"`
	LatencyMS  bench.Percentiles `json:"latency_ms"`
	Events     int               `json:"events"`
	Violations []Violation       `json:"violations"`
	Details    []*Order          `json:"orders_detail,omitempty"`
}

// OK reports whether no promise was broken.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// The rules the checker enforces.
const (
	RuleOneOrder       = "every accepted key has exactly one order"
	RuleNoSecond       = "no key has two orders"
	RuleNoStray        = "no order for a key that was never sent"
	RuleReplay         = "every replay is byte-identical to the first answer"
	RuleChanged        = "a changed-payload retry gets 422 and creates nothing"
	RuleReadable       = "every accepted order can be read back"
	RuleReadAsAnswered = "a created order reads back with the bytes of its 201"
	RuleAnswered       = "every client got an answer before the deadline"
	RuleNothingStored  = "no order for a key whose every answer said nothing was stored"
	maxViolationsPer   = 20
)

func (r *runner) verify(evs []storedEvent, took time.Duration) *Report {
	rep := &Report{Seconds: took.Seconds(), Orders: len(r.orders), Scenarios: map[string]int{}, Outcomes: map[string]int{}, Events: len(evs)}
	perRule := map[string]int{}
	violate := func(rule, key, format string, a ...any) {
		if perRule[rule]++; perRule[rule] <= maxViolationsPer {
			rep.Violations = append(rep.Violations, Violation{Rule: rule, Key: key, Detail: fmt.Sprintf(format, a...)})
		}
	}
	byKey := map[string][]storedEvent{}
	for _, e := range evs {
		byKey[e.KeyHash] = append(byKey[e.KeyHash], e)
	}
	sent := map[string]bool{}
	var lat []time.Duration
	for _, o := range r.orders {
		rep.Scenarios[string(o.Scenario)]++
		hash := idempotency.KeyHash(r.cfg.Tenant, o.Key)
		sent[hash] = true
		for _, a := range o.Attempts {
			rep.Requests++
			rep.Outcomes[outcome(a)]++
			if a.Status != 0 {
				lat = append(lat, a.Latency)
			}
		}
		created, rejected, changedCreated := 0, 0, 0
		for _, e := range byKey[hash] {
			switch {
			case e.Type == events.OrderCreatedType:
				created++
				if o.ChangedFP != "" && e.Fingerprint == o.ChangedFP {
					changedCreated++
				}
			case e.HoldsKey:
				rejected++
			}
		}
		accepted, loc := o.accepted()
		orders := created + rejected
		if orders > 1 {
			violate(RuleNoSecond, o.Key, "%d orders (%d created, %d rejected)", orders, created, rejected)
		}
		if accepted && orders != 1 {
			violate(RuleOneOrder, o.Key, "accepted, but %d orders stored", orders)
		}
		if accepted && o.Scenario != Reject && created != 1 {
			violate(RuleOneOrder, o.Key, "a valid order was accepted, %d OrderCreated stored", created)
		}
		if o.Scenario == Reject && created > 0 {
			violate(RuleOneOrder, o.Key, "an order with a wrong total was created")
		}
		switch {
		case o.nothingStored() && orders > 0:
			violate(RuleNothingStored, o.Key, "every answer said nothing was stored (%s), yet %d orders stored", o.summary(), orders)
		case !accepted && !o.ambiguous() && orders > 0:
			violate(RuleNoStray, o.Key, "never accepted, yet %d orders stored", orders)
		}
		if !accepted {
			violate(RuleAnswered, o.Key, "no answer accepted the order: %s", o.summary())
		}
		// Replays: every final answer equals the first.
		var first *Attempt
		for i := range o.Attempts {
			a := &o.Attempts[i]
			if a.Changed || !(a.Status == http.StatusCreated || (a.Status == http.StatusUnprocessableEntity && a.Code == "order_rejected")) {
				continue
			}
			if first == nil {
				first = a
				continue
			}
			if a.Status != first.Status || !bytes.Equal(a.body, first.body) || a.Location != first.Location {
				violate(RuleReplay, o.Key, "answer %d %q differs from the first %d %q", a.Status, a.body, first.Status, first.body)
			}
		}
		for _, a := range o.Attempts {
			if a.Changed && a.Status != 0 && a.Status != http.StatusServiceUnavailable &&
				!(a.Status == http.StatusUnprocessableEntity && a.Code == "idempotency_key_reused") {
				violate(RuleChanged, o.Key, "changed payload got %d %s", a.Status, a.Code)
			}
		}
		if changedCreated > 0 {
			violate(RuleChanged, o.Key, "the changed payload created an order")
		}
		if accepted && loc != "" && o.ReadBack != "created" && o.ReadBack != "rejected" {
			violate(RuleReadable, o.Key, "reading %s gave %q", loc, o.ReadBack)
		}
		// The order as read is its event; the 201 was its key's stored
		// response, stored first (ADR 0009): the two are one decision.
		if first != nil && first.Status == http.StatusCreated && o.ReadBack == "created" && !bytes.Equal(o.readBody, first.body) {
			violate(RuleReadAsAnswered, o.Key, "read back %q, answered %q", o.readBody, first.body)
		}
	}
	for _, hash := range sortedKeys(byKey) {
		if !sent[hash] {
			violate(RuleNoStray, "", "%d order(s) stored for a key hash this run never sent: %s", len(byKey[hash]), hash)
		}
	}
	for rule, n := range perRule {
		if n > maxViolationsPer {
			rep.Violations = append(rep.Violations, Violation{Rule: rule, Detail: fmt.Sprintf("%d more", n-maxViolationsPer)})
		}
	}
	rep.LatencyMS = bench.PercentilesOf(lat)
	rep.Details = r.orders
	return rep
}

// ambiguous reports whether a request may have reached the server without an
// answer that says what happened (a drop, a transport error, a 503
// outcome_unknown): an order may exist.
func (o *Order) ambiguous() bool {
	for _, a := range o.Attempts {
		if a.Status == 0 || (a.Status == http.StatusServiceUnavailable && a.Code != "service_unavailable") {
			return true
		}
	}
	return false
}

// nothingStored reports whether every answer to the order's own payload was
// "503 service_unavailable": the server promised each time that nothing was
// stored.
func (o *Order) nothingStored() bool {
	n := 0
	for _, a := range o.Attempts {
		if a.Changed {
			continue
		}
		if a.Status != http.StatusServiceUnavailable || a.Code != "service_unavailable" {
			return false
		}
		n++
	}
	return n > 0
}

func (o *Order) summary() string {
	var parts []string
	for _, a := range o.Attempts {
		parts = append(parts, outcome(a))
	}
	return strings.Join(parts, " ")
}

func outcome(a Attempt) string {
	switch {
	case a.Dropped:
		return "dropped"
	case a.Status == 0:
		return "no answer"
	case a.Code != "":
		return strconv.Itoa(a.Status) + " " + a.Code
	case a.Replayed:
		return strconv.Itoa(a.Status) + " replayed"
	default:
		return strconv.Itoa(a.Status)
	}
}

// Print writes the summary table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\n%d logical orders in %.1fs, %d requests, %d events checked\n\n", r.Orders, r.Seconds, r.Requests, r.Events)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\torders\t")
	for _, s := range sortedKeys(r.Scenarios) {
		fmt.Fprintf(tw, "%s\t%d\t\n", s, r.Scenarios[s])
	}
	fmt.Fprintln(tw, "\t\t")
	fmt.Fprintln(tw, "requests by outcome\tcount\t")
	for _, o := range sortedKeys(r.Outcomes) {
		fmt.Fprintf(tw, "%s\t%d\t\n", o, r.Outcomes[o])
	}
	tw.Flush()
	fmt.Fprintf(w, "\nlatency ms: p50 %.2f  p95 %.2f  p99 %.2f  max %.2f\n", r.LatencyMS.P50, r.LatencyMS.P95, r.LatencyMS.P99, r.LatencyMS.Max)
	if r.OK() {
		fmt.Fprintln(w, "\nviolations: none")
		return
	}
	fmt.Fprintf(w, "\nviolations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s: %s %s\n", v.Rule, v.Key, v.Detail)
	}
}
