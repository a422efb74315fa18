package processor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsonr"
)

// Claims is where the processor claims idempotency keys.
//
// Claim creates key with claim if the key has no record, atomically: of any
// number of concurrent callers, on any number of processes, exactly one wins.
// A caller that loses gets the record that won. Save overwrites the key's
// record.
//
// Get reads the key's record: a keyed order (ADR 0010) claims its key in the
// event store, and must not take a key that a record here gives to an order
// of the other form (or of a version before keyed IDs).
type Claims interface {
	Claim(ctx context.Context, key string, claim idempotency.Record) (holder idempotency.Record, won bool, err error)
	Save(ctx context.Context, key string, rec idempotency.Record) error
	Get(ctx context.Context, key string) (rec idempotency.Record, ok bool, err error)
}

// RecordsHint is implemented by Claims that can tell cheaply that they hold
// no record at all (every record expired): keyed orders then skip the read
// of their key's record.
type RecordsHint interface {
	MayHoldRecords(ctx context.Context) bool
}

// EventStore stores events.
//
// Append stores data as the event of kind k about orderID, at most once per
// order: when a terminal event of the order is already stored it returns nil
// with stored false, so that a redelivered command cannot store a second
// event. Event reads the order's stored event.
//
// For a keyed order ID (ADR 0010) the event is its idempotency key's claim:
// Append stores it only if the key has no keyed event (with AppendAll, none
// after the sequence After), and KeyEvent reads the key's last keyed event.
type EventStore interface {
	Append(ctx context.Context, k events.Kind, orderID string, data []byte) (stored bool, err error)
	Event(ctx context.Context, orderID string) (data []byte, ok bool, err error)
	KeyEvent(ctx context.Context, keyHash string) (ev KeyEvent, ok bool, err error)
}

// KeyEvent is the last keyed event of a key: Data as stored, its Subject, its
// sequence Seq (which a claim replacing it names as After), when it was
// Stored. An alias of an unnamed struct type, as ClaimRequest.
type KeyEvent = struct {
	Data    []byte
	Subject string
	Seq     uint64
	Stored  time.Time
}

// BatchClaims is implemented by Claims that make several claims with one wait
// (HandleBatch uses it; without it, the claims are made one by one).
type BatchClaims interface {
	ClaimAll(ctx context.Context, reqs []ClaimRequest) []ClaimOutcome
}

// ClaimRequest is one claim of ClaimAll: Claim(ctx, Key, Record). It and the
// other request and outcome types are aliases of unnamed struct types, which
// the stores declare alike: a store implements the batch ports without
// importing this package, and neither side copies requests or outcomes.
type ClaimRequest = struct {
	Key    string
	Record idempotency.Record
}

// ClaimOutcome is what Claim returns for one claim of ClaimAll.
type ClaimOutcome = struct {
	Holder idempotency.Record
	Won    bool
	Err    error
}

// BatchEvents is implemented by event stores that store several events with
// one wait (HandleBatch uses it; without it, they are appended one by one).
type BatchEvents interface {
	AppendAll(ctx context.Context, reqs []AppendRequest) []AppendOutcome
}

// AppendRequest is one event of AppendAll: Append(Ctx, Kind, OrderID, Data).
// Ctx carries the trace of the command the event decides. For a keyed order
// the event is the key's claim, and After the sequence of the key's last
// event that it replaces (0: none).
type AppendRequest = struct {
	Ctx     context.Context
	Kind    events.Kind
	OrderID string
	Data    []byte
	After   uint64
}

// AppendOutcome is what Append returns for one event of AppendAll.
type AppendOutcome = struct {
	Stored bool
	Err    error
}

// Deps are the processor's ports.
type Deps struct {
	Claims Claims
	Events EventStore
}

// Hooks let tests inject faults into the handling of a command. Production
// code leaves them nil. An error a hook returns fails this delivery (it is
// retried); a panic is a crash of the handler; blocking past the ack wait is
// a timeout.
type Hooks struct {
	// BeforeClaim runs before the decision is stored: a failure there leaves
	// the key free.
	BeforeClaim func(ctx context.Context, cmd events.CreateOrder, delivered int) error
	// AfterClaim runs once the key holds the command's decision: its stored
	// response, before the decision's event is stored; for a keyed order,
	// its event (the claim), before the command is acked.
	AfterClaim func(ctx context.Context, cmd events.CreateOrder, delivered int) error
}

// Config configures the processor.
type Config struct {
	// Hooks inject faults in tests; zero in production.
	Hooks Hooks
	// ResultTTL is how long a decision holds its idempotency key (serve
	// --result-ttl): a keyed order's claim takes a key whose last event was
	// decided longer ago (default 24h).
	ResultTTL time.Duration
}

// kindNone labels the decisions that store no event.
const kindNone = "none"

// Delivery is one delivery of a command.
type Delivery struct {
	// Data is the command as stored.
	Data []byte
	// Seq is the command's sequence in ORDER_COMMANDS; with the nonce it makes
	// the order ID.
	Seq uint64
	// OrderSeq, when not 0, is the sequence the order ID is made of instead of
	// Seq: a replayed command's original (events.HeaderReplayOf), so that the
	// order keeps its ID and the exactly-once rules hold across the replay.
	OrderSeq uint64
	// Delivered counts the deliveries of the command, 1 the first time.
	Delivered int
	// Ctx, when not nil, carries the delivery's trace (its logs and its
	// event's headers) in a batch; the batch's context is used otherwise.
	Ctx context.Context
}

// Handler turns a CreateOrder command into OrderCreated or OrderRejected.
type Handler struct {
	cfg     Config
	deps    Deps
	now     func() time.Time
	logger  *slog.Logger
	decided *prometheus.CounterVec
}

// New returns the handler. reg receives orderly_commands_decided_total.
func New(cfg Config, deps Deps, reg prometheus.Registerer, logger *slog.Logger) (*Handler, error) {
	var errs []error
	if deps.Claims == nil || deps.Events == nil {
		errs = append(errs, errors.New("processor: nil dependency"))
	}
	if reg == nil || logger == nil {
		errs = append(errs, errors.New("processor: nil registerer or logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	decided := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderly_commands_decided_total",
		Help: "CreateOrder commands decided by the processor, by event kind; none: an order with a keyed ID that lost its idempotency key to another order, which stores no event.",
	}, []string{"kind"})
	if err := reg.Register(decided); err != nil {
		return nil, err
	}
	for _, kind := range []string{string(events.KindCreated), string(events.KindRejected), kindNone} {
		decided.WithLabelValues(kind) // at 0 from the start, so that rate() sees the first of each
	}
	if cfg.ResultTTL <= 0 {
		cfg.ResultTTL = 24 * time.Hour
	}
	return &Handler{cfg: cfg, deps: deps, now: time.Now, logger: logger.With("component", "processor"), decided: decided}, nil
}

// Handle processes one delivery of a command. Its contract with the pipeline:
//   - nil: the terminal event of the order is stored; the command may be acked;
//   - a Permanent error: the command is malformed; no retry can succeed;
//   - any other error: retry later. Errors of the stores are returned as they
//     are, so that the pipeline tells an unavailable NATS (hold and retry,
//     never poison) from a failure of the command.
//
// The decision is made first and its stored response is the claim of the key
// (ADR 0009): one write decides the key and answers every request for it.
// The event follows. Every step is idempotent, so a redelivery after a crash
// at any point resumes the work: the claim of a redelivered command is its
// own (same order ID), from which the same decision is made again, byte for
// byte, and the event store keeps the first terminal event of an order.
func (h *Handler) Handle(ctx context.Context, d Delivery) error {
	return h.HandleBatch(ctx, []Delivery{d})[0]
}

// HandleBatch processes deliveries as Handle processes each, and returns
// each one's error in order. Their claims are made together, then their
// events are stored together (ADR 0011): with ports that implement
// BatchClaims and BatchEvents that is two waits for the whole batch instead
// of two round trips per command. Each command's steps keep their order, so
// a crash anywhere leaves each one where Handle would have left it. Two
// commands of one key in a batch: the first claim stored wins, as between
// two processors.
func (h *Handler) HandleBatch(ctx context.Context, ds []Delivery) []error {
	errs := make([]error, len(ds))
	var ws []work // made on first use: a batch is usually all of one form
	var keyed []keyedWork
	for i, d := range ds {
		dctx := d.Ctx
		if dctx == nil {
			dctx = ctx
		}
		cmd, orderID, err := decodeCommand(d)
		if err != nil {
			errs[i] = Permanent(err)
			continue
		}
		if h.cfg.Hooks.BeforeClaim != nil {
			if err := h.cfg.Hooks.BeforeClaim(dctx, cmd, d.Delivered); err != nil {
				errs[i] = err
				continue
			}
		}
		if cmd.Keyed() { // its event is all it stores
			if keyed == nil {
				keyed = make([]keyedWork, 0, len(ds)-i)
			}
			keyed = append(keyed, item{i: i, ctx: dctx, cmd: cmd, orderID: orderID, dec: decide(cmd, orderID, h.now(), false), delivered: d.Delivered})
			continue
		}
		if ws == nil {
			ws = make([]work, 0, len(ds)-i)
		}
		ws = append(ws, work{item: item{i: i, ctx: dctx, cmd: cmd, orderID: orderID, dec: Decide(cmd, orderID, h.now()), delivered: d.Delivered}})
	}
	// Commands of the nonce form first: a keyed command of the same key in
	// this batch then finds their claims (it reads the key's record).
	h.claimResponses(ctx, ws, errs)
	h.claimKeys(ctx, keyed, errs)
	return errs
}

// work is one command of the nonce form in a batch.
type work struct {
	item
	holder idempotency.Record
	won    bool
	// keyHolder is the keyed order that holds the key (ADR 0010), if any:
	// the command is rejected naming it, and claims nothing.
	keyHolder *idempotency.Record
}

// claimResponses decides the commands of the nonce form ws of a batch (see
// HandleBatch), each one's error in errs.
func (h *Handler) claimResponses(ctx context.Context, ws []work, errs []error) {
	if len(ws) == 0 {
		return
	}
	ws = h.keyedHolders(ctx, ws, errs)
	claims := make([]ClaimRequest, 0, len(ws))
	for _, w := range ws {
		if w.keyHolder == nil {
			claims = append(claims, ClaimRequest{Key: w.cmd.KeyHash, Record: w.dec.Record})
		}
	}
	outcomes := h.claimAll(ctx, claims)
	claimed := ws[:0]
	for _, w := range ws {
		var o ClaimOutcome
		if w.keyHolder != nil {
			o.Holder = *w.keyHolder
		} else {
			o, outcomes = outcomes[0], outcomes[1:]
		}
		if o.Err != nil {
			errs[w.i] = fmt.Errorf("claim key of %s: %w", w.orderID, o.Err)
			if errors.Is(o.Err, idempotency.ErrBadRecord) {
				// The key holds what orderly never writes: no retry reads
				// it, and no decision of this command can take the key.
				errs[w.i] = Permanent(errs[w.i])
			}
			continue
		}
		w.holder, w.won = o.Holder, o.Won
		w.dec = h.decision(w.cmd, w.orderID, w.dec, o.Holder, o.Won)
		if w.dec.HoldsKey() && h.cfg.Hooks.AfterClaim != nil {
			if err := h.cfg.Hooks.AfterClaim(w.ctx, w.cmd, w.delivered); err != nil {
				errs[w.i] = err
				continue
			}
		}
		claimed = append(claimed, w)
	}

	appends := make([]AppendRequest, len(claimed))
	for j, w := range claimed {
		appends[j] = AppendRequest{Ctx: w.ctx, Kind: w.dec.Kind, OrderID: w.orderID, Data: w.dec.Event}
	}
	for j, o := range h.appendAll(ctx, appends) {
		w := claimed[j]
		stored, err := h.counted(w.orderID, w.dec, o)
		if err != nil {
			errs[w.i] = err
			continue
		}
		errs[w.i] = h.settled(w.ctx, w.cmd, w.orderID, w.dec, w.holder, w.won, stored)
	}
}

// decision is the decision that stands once the key's claim returned holder:
// dec when this command won the key, the decision stored for it by an
// earlier delivery, or the rejection of a duplicate or a reused key.
func (h *Handler) decision(cmd events.CreateOrder, orderID string, dec Decision, holder idempotency.Record, won bool) Decision {
	switch {
	case won:
		return dec
	case holder.OrderID == orderID: // ours, from an earlier delivery
		return h.again(cmd, orderID, holder)
	case holder.Fingerprint == cmd.Fingerprint:
		return reject(cmd, orderID, h.now(), events.ReasonDuplicate, holder.OrderID,
			fmt.Sprintf("the idempotency key already belongs to order %s with the same request", holder.OrderID))
	default:
		return reject(cmd, orderID, h.now(), events.ReasonKeyReused, holder.OrderID,
			fmt.Sprintf("the idempotency key already belongs to order %s with a different request", holder.OrderID))
	}
}

// claimAll makes the claims, at once when the port can.
func (h *Handler) claimAll(ctx context.Context, reqs []ClaimRequest) []ClaimOutcome {
	if b, ok := h.deps.Claims.(BatchClaims); ok && len(reqs) > 1 {
		return b.ClaimAll(ctx, reqs)
	}
	out := make([]ClaimOutcome, len(reqs))
	for i, q := range reqs {
		out[i].Holder, out[i].Won, out[i].Err = h.deps.Claims.Claim(ctx, q.Key, q.Record)
	}
	return out
}

// appendAll stores the events, at once when the port can (and only then
// claims a key after its holder).
func (h *Handler) appendAll(ctx context.Context, reqs []AppendRequest) []AppendOutcome {
	if b, ok := h.deps.Events.(BatchEvents); ok && (len(reqs) > 1 || len(reqs) == 1 && reqs[0].After != 0) {
		return b.AppendAll(ctx, reqs)
	}
	out := make([]AppendOutcome, len(reqs))
	for i, q := range reqs {
		qctx := q.Ctx
		if qctx == nil {
			qctx = ctx
		}
		if q.After != 0 {
			out[i].Err = errors.New("the event store cannot claim a key after its holder: it does not implement BatchEvents")
			continue
		}
		out[i].Stored, out[i].Err = h.deps.Events.Append(qctx, q.Kind, q.OrderID, q.Data)
	}
	return out
}

// settle stores the decision's event and sees that the key's response and
// the order's stored event say the same (settled).
func (h *Handler) settle(ctx context.Context, cmd events.CreateOrder, orderID string, dec Decision, holder idempotency.Record, won bool) error {
	stored, err := h.store(ctx, orderID, dec)
	if err != nil {
		return err
	}
	return h.settled(ctx, cmd, orderID, dec, holder, won, stored)
}

// settled sees, once the decision's event is stored (or was, stored false),
// that the key's response and the order's stored event say the same: when
// the order had an event before this delivery won its key, and when the key
// holds a pending claim of a version before ADR 0009, which that version's
// projector would have completed.
func (h *Handler) settled(ctx context.Context, cmd events.CreateOrder, orderID string, dec Decision, holder idempotency.Record, won, stored bool) error {
	legacy := !won && holder.OrderID == orderID && !holder.Completed()
	switch {
	case legacy && stored:
		return h.respond(ctx, cmd.KeyHash, orderID, dec.Record)
	case legacy || won && !stored:
		return h.reconcile(ctx, cmd, orderID, dec)
	}
	return nil
}

// reconcile makes the key's response of the order's stored event. It runs
// when the order already had an event though this delivery won its key (an
// earlier delivery decided it, and that decision's response expired or was
// evicted before this redelivery: a processor down for longer than the
// result TTL with the command unacked), or held it with a pending claim of an
// earlier version. The event stands; the key's response is made of it, so
// that both say the same.
func (h *Handler) reconcile(ctx context.Context, cmd events.CreateOrder, orderID string, dec Decision) error {
	data, ok, err := h.deps.Events.Event(ctx, orderID)
	if err != nil {
		return fmt.Errorf("read the stored event of %s: %w", orderID, err)
	}
	if !ok {
		return nil // gone since (past the event retention): the new response stands
	}
	var ev struct {
		Time time.Time `json:"time"`
	}
	if err := jsonr.Unmarshal(data, &ev); err != nil {
		return Permanent(fmt.Errorf("stored event of %s: %w", orderID, err))
	}
	for _, c := range append([]Decision{dec}, decisionsAt(cmd, orderID, ev.Time)...) {
		if bytes.Equal(c.Event, data) {
			return h.respond(ctx, cmd.KeyHash, orderID, c.Record)
		}
	}
	h.logger.ErrorContext(ctx, "the order's stored event is not a decision this version makes; its key's response is left as it is", "order_id", orderID)
	return nil
}

// respond stores rec as the key's response.
func (h *Handler) respond(ctx context.Context, key, orderID string, rec idempotency.Record) error {
	if err := h.deps.Claims.Save(ctx, key, rec); err != nil {
		return fmt.Errorf("store the response of %s: %w", orderID, err)
	}
	return nil
}

// again makes again the decision that holder, the key's record for this
// order, stores: the decision at the stored time, or the rejection the
// processor gives up with. A holder of an earlier version (a pending claim,
// or a response without the decision time) had its event decided anew, as
// that version did; a stored event is kept either way.
func (h *Handler) again(cmd events.CreateOrder, orderID string, holder idempotency.Record) Decision {
	at := holder.Decided()
	if at.IsZero() {
		return Decide(cmd, orderID, h.now())
	}
	want := holder.Encode()
	candidates := decisionsAt(cmd, orderID, at)
	for _, c := range candidates {
		if bytes.Equal(c.Record.Encode(), want) {
			return c
		}
	}
	// The rendering of responses changed since the record was stored: the
	// decision of the same kind stands (its times and IDs are the record's).
	h.logger.Warn("stored response differs from the decision made again", "order_id", orderID, "status", holder.Status)
	if decided := candidates[0]; holder.Status == http.StatusCreated || decided.Kind == events.KindRejected {
		return decided
	}
	return candidates[1]
}

// decisionsAt are the decisions the processor can have stored for the
// command at time at: its decision, and the rejection it gives up with.
func decisionsAt(cmd events.CreateOrder, orderID string, at time.Time) []Decision {
	return []Decision{Decide(cmd, orderID, at), givingUp(cmd, orderID, at)}
}

// store appends the decision's event and counts it; stored is false when the
// order already had an event.
func (h *Handler) store(ctx context.Context, orderID string, dec Decision) (stored bool, err error) {
	o := h.appendAll(ctx, []AppendRequest{{Ctx: ctx, Kind: dec.Kind, OrderID: orderID, Data: dec.Event}})[0]
	return h.counted(orderID, dec, o)
}

// counted is the outcome of the append of dec's event, counted when stored.
func (h *Handler) counted(orderID string, dec Decision, o AppendOutcome) (stored bool, err error) {
	if o.Err != nil {
		return false, fmt.Errorf("store %s event of %s: %w", dec.Kind, orderID, o.Err)
	}
	if o.Stored {
		h.decided.WithLabelValues(string(dec.Kind)).Inc()
	}
	return o.Stored, nil
}

// givingUp is the rejection of an order that cannot be processed.
func givingUp(cmd events.CreateOrder, orderID string, now time.Time) Decision {
	return reject(cmd, orderID, now, events.ReasonProcessingFailed, "",
		"the order could not be processed; use a new idempotency key to try again")
}

// GiveUp runs before the pipeline dead-letters a command that cannot be
// processed. When nobody holds the command's key, it stores an OrderRejected
// with reason processing_failed as the key's answer (422 order_rejected,
// replayed like any result) instead of leaving the key without one. When the
// key already holds this order's decision, that decision stands, and GiveUp
// stores its event: the response may have been sent. It is idempotent; an
// error keeps the command for another try.
func (h *Handler) GiveUp(ctx context.Context, d Delivery, cause error) error {
	cmd, orderID, err := decodeCommand(d)
	if err != nil {
		return nil // no order to answer for: the dead letter is all there is
	}
	dec := givingUp(cmd, orderID, h.now())
	if cmd.Keyed() {
		return h.giveUpKeyed(ctx, keyedWork{ctx: ctx, cmd: cmd, orderID: orderID, dec: dec, delivered: d.Delivered}, cause)
	}
	holder, won, err := h.deps.Claims.Claim(ctx, cmd.KeyHash, dec.Record)
	if errors.Is(err, idempotency.ErrBadRecord) {
		h.leftUndecided(ctx, orderID, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("claim key of %s: %w", orderID, err)
	}
	switch {
	case won:
	case holder.OrderID != orderID:
		return nil // another order answers for the key
	case holder.Completed() && !holder.Decided().IsZero():
		dec = h.again(cmd, orderID, holder)
	}
	// else a pending claim of an earlier version: rejected, as it would have been
	if err := h.settle(ctx, cmd, orderID, dec, holder, won); err != nil {
		return err
	}
	if dec.reason != events.ReasonProcessingFailed {
		h.logger.WarnContext(ctx, "decided order's event stored on giving up: its response was stored before the failure",
			"order_id", orderID, "kind", dec.Kind, "cause", cause)
		return nil
	}
	h.logger.ErrorContext(ctx, "order rejected as processing_failed", "order_id", orderID, "cause", cause)
	return nil
}

// leftUndecided logs a command given up because its key holds a record that
// cannot be decoded: nothing can be stored for the key until the record is
// mended (orderly projections rebuild removes it); the dead letter keeps the
// command for orderly dlq replay.
func (h *Handler) leftUndecided(ctx context.Context, orderID string, err error) {
	h.logger.ErrorContext(ctx, "order left undecided: its key holds a record that cannot be decoded", "order_id", orderID, "err", err)
}

// decodeCommand decodes and checks a delivered command and computes its order ID.
func decodeCommand(d Delivery) (events.CreateOrder, string, error) {
	cmd, err := jsonr.DecodeCreateOrder(d.Data)
	if err != nil {
		return cmd, "", fmt.Errorf("undecodable command: %w", err)
	}
	var errs []error
	if cmd.Type != events.CreateOrderType {
		errs = append(errs, fmt.Errorf("unknown command type %q", cmd.Type))
	}
	if !idempotency.ValidKeyHash(cmd.KeyHash) || cmd.Fingerprint == "" {
		errs = append(errs, errors.New("command without a valid key hash or fingerprint"))
	}
	if d.Seq == 0 {
		errs = append(errs, errors.New("command without a stream sequence"))
	}
	seq := d.Seq
	if d.OrderSeq != 0 {
		seq = d.OrderSeq
	}
	orderID, ok := cmd.OrderIDAt(seq)
	if !ok {
		errs = append(errs, fmt.Errorf("command cannot make an order ID: form %q, nonce %q", cmd.IDForm, cmd.Nonce))
	}
	if err := errors.Join(errs...); err != nil {
		return cmd, "", err
	}
	return cmd, orderID, nil
}
