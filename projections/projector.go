package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// Projection is what one event means for the reads: the order as GET shows it,
// and the stored response of its idempotency key.
type Projection struct {
	// OrderID and Order are the order as GET /v1/orders/{id} shows it.
	OrderID string
	Order   idempotency.Order
	// Key and Record are the key's entry in ORDER_RESULTS; Record is nil when
	// the event does not answer for its idempotency key (a duplicate of
	// another order).
	Key    string
	Record *idempotency.Record
	// At is the event time.
	At time.Time
}

// KeyedAnswer reports whether the event is itself its key's answer: the
// record of a keyed order (ADR 0010), which ORDER_RESULTS never holds.
func (p Projection) KeyedAnswer() bool {
	if p.Record == nil {
		return false
	}
	_, _, keyed := events.ParseKeyedOrderID(p.Record.OrderID)
	return keyed
}

// anyOrderEvent holds the data of either kind of order event: the fields of
// OrderCreated, and those only OrderRejected has.
type anyOrderEvent struct {
	events.OrderCreated
	Reason      string              `json:"reason"`
	Detail      string              `json:"detail"`
	DuplicateOf string              `json:"duplicate_of"`
	Request     events.OrderRequest `json:"request"`
	RejectedAt  time.Time           `json:"rejected_at"`
}

// ErrUnknownType is returned by Project for an event type it does not know.
var ErrUnknownType = errors.New("unknown event type")

// ErrNoKeyHash is returned by Project for an event whose
// idempotency_key_hash is not a key hash: the key becomes a subject of
// ORDER_RESULTS, and every event the processor stores holds a valid one, so
// such an event was not written by orderly.
var ErrNoKeyHash = errors.New("idempotency_key_hash is not a key hash")

// ErrNoOrderID is returned by Project for an event whose order_id (or
// duplicate_of) is not an order ID of either form: it goes into the
// Location of the key's answer, so such an event was not written by
// orderly either.
var ErrNoOrderID = errors.New("not an order ID")

// Project computes the read-model records of an event. It is a pure function
// of the event, so projecting an event twice, or again in a rebuild, writes
// the same bytes.
func Project(data []byte) (Projection, error) {
	// One pass over the event: its data decoded into the fields of both
	// kinds at once (they share no name with different meanings).
	ev, err := decodeEvent(data)
	if err != nil {
		return Projection{}, fmt.Errorf("decode event: %w", err)
	}
	if ev.Type == events.OrderCreatedType || ev.Type == events.OrderRejectedType {
		switch d := ev.Data; {
		case !idempotency.ValidKeyHash(d.IdempotencyKeyHash):
			return Projection{}, fmt.Errorf("event %q: %w: %q", ev.ID, ErrNoKeyHash, d.IdempotencyKeyHash)
		case !events.ValidOrderID(d.OrderID):
			return Projection{}, fmt.Errorf("event %q: %w: order_id %q", ev.ID, ErrNoOrderID, d.OrderID)
		case d.DuplicateOf != "" && !events.ValidOrderID(d.DuplicateOf):
			return Projection{}, fmt.Errorf("event %q: %w: duplicate_of %q", ev.ID, ErrNoOrderID, d.DuplicateOf)
		}
	}
	switch ev.Type {
	case events.OrderCreatedType:
		d := ev.Data.OrderCreated
		r := idempotency.Created(d)
		r.DecidedUnixNano = ev.Time.UnixNano()
		o := idempotency.Order{Tenant: d.Tenant, Status: idempotency.StatusCreated, Body: r.Body}
		return Projection{OrderID: d.OrderID, Order: o, Key: d.IdempotencyKeyHash, Record: &r, At: ev.Time}, nil
	case events.OrderRejectedType:
		c := ev.Data.OrderCreated
		d := events.OrderRejected{OrderID: c.OrderID, Tenant: c.Tenant, Reason: ev.Data.Reason, Detail: ev.Data.Detail,
			DuplicateOf: ev.Data.DuplicateOf, Request: ev.Data.Request, IdempotencyKeyHash: c.IdempotencyKeyHash,
			RequestFingerprint: c.RequestFingerprint, AcceptedAt: c.AcceptedAt, RejectedAt: ev.Data.RejectedAt}
		p := Projection{OrderID: d.OrderID, Order: idempotency.RejectedOrder(d), Key: d.IdempotencyKeyHash, At: ev.Time}
		if d.HoldsKey() {
			r := idempotency.Rejected(d)
			r.DecidedUnixNano = ev.Time.UnixNano()
			p.Record = &r
		}
		return p, nil
	default:
		return Projection{}, fmt.Errorf("%w %q", ErrUnknownType, ev.Type)
	}
}

// ResultWriter stores a key's record; writing the same record again is
// harmless.
type ResultWriter interface {
	Save(ctx context.Context, key string, rec idempotency.Record) error
}

// ProjectorConfig configures a Projector.
type ProjectorConfig struct {
	// ResultTTL is the time to live of ORDER_RESULTS: an event older than
	// that is not projected, its key may already belong to a newer order.
	// Required.
	ResultTTL time.Duration
}

// Validate reports every problem with c.
func (c ProjectorConfig) Validate() error {
	if c.ResultTTL <= 0 {
		return fmt.Errorf("projector: result TTL must be positive, got %s", c.ResultTTL)
	}
	return nil
}

// Projector keeps ORDER_RESULTS up to date with ORDER_EVENTS: it stores the
// response of each order's idempotency key. It is idempotent: a redelivered
// event writes the same record again.
type Projector struct {
	cfg     ProjectorConfig
	results ResultWriter
	logger  *slog.Logger
	skipped *prometheus.CounterVec
	now     func() time.Time
}

// Why the projector acked an event without projecting it: the values of
// orderly_events_skipped_total's reason label.
const (
	skipUnknownType = "unknown_type"
	skipUndecodable = "undecodable"
	skipKeyed       = "keyed"
)

// NewProjector returns a projector writing to results. reg receives
// orderly_events_skipped_total.
func NewProjector(cfg ProjectorConfig, results ResultWriter, reg prometheus.Registerer, logger *slog.Logger) (*Projector, error) {
	errs := []error{cfg.Validate()}
	if results == nil || reg == nil || logger == nil {
		errs = append(errs, errors.New("projector: nil dependency"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderly_events_skipped_total",
		Help: "Events the projector acked without projecting them, by reason.",
	}, []string{"reason"})
	if err := reg.Register(skipped); err != nil {
		return nil, err
	}
	for _, reason := range []string{skipUnknownType, skipUndecodable, skipKeyed} {
		skipped.WithLabelValues(reason) // exposed at 0 from the start: a series that appears at 1 shows Prometheus no increase
	}
	return &Projector{cfg: cfg, results: results, logger: logger.With("component", "projector"), skipped: skipped, now: time.Now}, nil
}

// Handle projects one event. Its contract with the pipeline: nil once the
// record is stored (or when the event calls for none); an error (redelivered
// later) only when the write failed. An event it cannot read is logged,
// counted and acked, because no retry can make it readable; a read model
// that skipped an event it could read would be wrong for ever, so the
// projector never gives up on one.
func (p *Projector) Handle(ctx context.Context, data []byte) error {
	proj, err := Project(data)
	if errors.Is(err, ErrUnknownType) {
		p.logger.DebugContext(ctx, "event type not projected", "err", err)
		p.skipped.WithLabelValues(skipUnknownType).Inc()
		return nil
	}
	if err != nil {
		p.logger.ErrorContext(ctx, "event cannot be projected; acked without projection", "err", err)
		p.skipped.WithLabelValues(skipUndecodable).Inc()
		return nil
	}
	if proj.Record == nil {
		return nil // a duplicate of another order: its key answers with that order
	}
	if proj.KeyedAnswer() {
		// A keyed order's event is its key's answer (ADR 0010): a record
		// would only cost memory, and outlive the key by the projector's lag.
		p.skipped.WithLabelValues(skipKeyed).Inc()
		return nil
	}
	if p.now().Sub(proj.At) >= p.cfg.ResultTTL {
		// The result has expired: its key may already belong to a newer order.
		return nil
	}
	return p.results.Save(ctx, proj.Key, *proj.Record)
}
