// Package app holds the API's use cases: submit an order under an idempotency
// key, read an order, read its events. It knows the rules (when to replay,
// when to publish, how long to wait) and reaches NATS only through the small
// interfaces below, which it declares; the HTTP layer turns its outcomes and
// errors into responses.
//
// It may import events and idempotency, and must not import NATS, watermill,
// gin or the packages that adapt them.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/attempt"
)

// Results reads the key records of ORDER_RESULTS; ok is false when the key
// has none.
type Results interface {
	Get(ctx context.Context, key string) (rec idempotency.Record, ok bool, err error)
}

// Cache is the process's memory of the records: a completed record does not
// change until it expires, so a remembered one answers a replay without a
// round trip; and KnownNew is true for a key the process can tell had no
// record when its view of the store was last updated, so that a new key is
// published without a read (false whenever it cannot tell).
type Cache interface {
	CachedResult(key string) (idempotency.Record, bool)
	Remember(key string, rec idempotency.Record)
	KnownNew(key string) bool
}

// Watcher delivers what is stored from the moment of the call on: WatchResult
// the records of a key, WatchOrder a signal when an order is decided. Call it
// before the read or publish whose outcome it waits for. The channel holds the
// latest update not yet read; cancel unregisters. Live is nil while updates
// flow; while it is not, a waiter reads the store itself, often.
type Watcher interface {
	WatchResult(key string) (c <-chan idempotency.Record, cancel func())
	WatchOrder(orderID string) (c <-chan struct{}, cancel func())
	Live() error
}

// Commands is ORDER_COMMANDS.
//
// Publish stores cmd with its KeyHash as Nats-Msg-Id and returns once the
// broker confirmed it: durably stored (its sequence), or a duplicate of one
// stored in the window (duplicate true, the original's sequence). Publishing
// the same command again is safe. Command reads the command at a stream
// sequence; FindCommand the command of an order, ok false when there is none.
//
// The errors of every port may say more through two methods (the adapter
// implements them, as net.Error does Timeout): Temporary() bool, true when
// NATS was unavailable and the call may succeed later unchanged; and, for
// Publish, NotStored() bool, true when nothing was certainly stored. A
// Publish error without NotStored may have stored the command.
type Commands interface {
	Publish(ctx context.Context, cmd events.CreateOrder) (seq uint64, duplicate bool, err error)
	Command(ctx context.Context, seq uint64) (events.CreateOrder, error)
	FindCommand(ctx context.Context, orderID string) (cmd events.CreateOrder, ok bool, err error)
}

// Orders reads decided orders: the order rendered from its terminal event,
// and the event as stored; ok is false while it has none.
type Orders interface {
	Decided(ctx context.Context, orderID string) (order idempotency.Order, event []byte, ok bool, err error)
}

// Deps are the service's ports.
type Deps struct {
	Results  Results
	Cache    Cache
	Watcher  Watcher
	Commands Commands
	Orders   Orders
	// Durable, when set, makes every answer that tells what the store holds
	// wait until that is on disk (serve --fsync group, internal/durable).
	Durable Durable
}

// Durable waits for a sync of the store that starts after the call.
type Durable interface {
	Wait(ctx context.Context) error
	// SyncedSince reports whether a sync that started after t has completed
	// without error: what the store held at t is durable.
	SyncedSince(t time.Time) bool
}

// durable returns err once what the answer says is durable (Deps.Durable),
// or the error that says why it may not be. Errors that reveal nothing
// stored (no such order, NATS unavailable) need no wait.
func (s *Service) durable(ctx context.Context, err error, failed error) error {
	if s.deps.Durable == nil || (err != nil && !tellsWhatIsStored(err)) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout) // a disk that stalls costs no more than NATS may
	defer cancel()
	if werr := s.deps.Durable.Wait(ctx); werr != nil {
		return fmt.Errorf("%w: the store's sync: %v", failed, werr)
	}
	return err
}

// tellsWhatIsStored reports whether err is an answer about a stored order
// (the key's holder), which needs the sync like a success. Apart from
// durable so that its targets are not allocated for every answer.
func tellsWhatIsStored(err error) bool {
	var reused *KeyReusedError
	var superseded *SupersededError
	return errors.As(err, &reused) || errors.As(err, &superseded)
}

// Errors of the use cases. The HTTP layer maps them to statuses.
var (
	// ErrUnavailable: NATS was unavailable and nothing was stored, so the
	// client may retry with the same key.
	ErrUnavailable = errors.New("order store unavailable")
	// ErrNotFound: no such order for this tenant.
	ErrNotFound = errors.New("order not found")
	// ErrOutcomeUnknown: the command was sent, and whether it was stored is
	// not known within the request's budget: a retry with the same key
	// learns the outcome (it is answered from the stored command or result).
	ErrOutcomeUnknown = errors.New("the order store did not confirm the command in time")
)

// temporary reports whether err says NATS was unavailable.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// notStored reports whether a write certainly stored nothing.
func notStored(err error) bool {
	var n interface{ NotStored() bool }
	return errors.As(err, &n) && n.NotStored()
}

// SupersededError: the order has a keyed ID and its command lost the
// idempotency key to another order, which answers for the key; the order
// has no event and never will (ADR 0010).
type SupersededError struct {
	// OrderID is the order that holds the key.
	OrderID string
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("the order lost its idempotency key to order %s", e.OrderID)
}

// KeyReusedError: the idempotency key belongs to another request.
type KeyReusedError struct {
	// OrderID is the order that holds the key.
	OrderID string
}

func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("idempotency key already used for a different request (order %s)", e.OrderID)
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// Config configures the service. Zero fields take defaults.
type Config struct {
	// RequestTimeout is the budget of each NATS operation of a request,
	// retries included: a read or a publish that fails because NATS is
	// unavailable (a leader election, a node that went away) is tried again,
	// with backoff, until it succeeds or the budget is spent (default 10s,
	// longer than a JetStream election of 4 to 9 s).
	RequestTimeout time.Duration
	// Up, when set, returns a context that is canceled when the connection to
	// NATS is lost (and is canceled while it is down). A request then waits at
	// most ReconnectGrace for it to come back (a failover to another server
	// takes less), and fails with ErrUnavailable instead of waiting out the
	// budget.
	Up func() context.Context
	// ReconnectGrace bounds that wait (default 500ms).
	ReconnectGrace time.Duration
	// PollInterval is how often a waiting request reads the store itself as a
	// safety net while the watcher is live (default 1s); DownPollInterval
	// while it is not (default 100ms).
	PollInterval, DownPollInterval time.Duration
	// KeyedOrderIDs makes the orders of new commands take keyed IDs (ADR
	// 0010): ord_<seq><key token>, their events on the keyed subjects. Only
	// processors of a version that knows keyed commands may run. It is where
	// the service starts; SetKeyedOrderIDs changes it.
	KeyedOrderIDs bool
}

func (c *Config) setDefaults() {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.ReconnectGrace == 0 {
		c.ReconnectGrace = 500 * time.Millisecond
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.DownPollInterval == 0 {
		c.DownPollInterval = 100 * time.Millisecond
	}
}

// Validate reports every problem with c; zero fields count as their defaults.
func (c Config) Validate() error {
	c.setDefaults()
	if c.RequestTimeout <= 0 || c.ReconnectGrace < 0 || c.PollInterval <= 0 || c.DownPollInterval <= 0 {
		return fmt.Errorf("request timeout, reconnect grace and poll intervals must be positive, got %s, %s, %s, %s",
			c.RequestTimeout, c.ReconnectGrace, c.PollInterval, c.DownPollInterval)
	}
	return nil
}

// Service implements the use cases.
type Service struct {
	cfg      Config
	deps     Deps
	logger   *slog.Logger
	now      func() time.Time
	newNonce func() string
	// draining is closed by Drain: waits end at once.
	draining  chan struct{}
	drainOnce sync.Once
	// keyed says whether new orders take keyed IDs.
	keyed atomic.Bool
	// stored counts the commands stored (Stored).
	stored atomic.Uint64
}

// NewService returns the service.
func NewService(cfg Config, deps Deps, logger *slog.Logger) (*Service, error) {
	cfg.setDefaults()
	errs := []error{cfg.Validate()}
	if deps.Results == nil || deps.Cache == nil || deps.Watcher == nil || deps.Commands == nil || deps.Orders == nil {
		errs = append(errs, errors.New("app: nil dependency"))
	}
	if logger == nil {
		errs = append(errs, errors.New("app: nil logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, deps: deps, logger: logger,
		now: time.Now, newNonce: events.NewNonce, draining: make(chan struct{})}
	s.keyed.Store(cfg.KeyedOrderIDs)
	return s, nil
}

// SetKeyedOrderIDs says whether the orders of the commands published from
// now on take keyed IDs.
func (s *Service) SetKeyedOrderIDs(keyed bool) { s.keyed.Store(keyed) }

// KeyedOrderIDs says whether new orders take keyed IDs.
func (s *Service) KeyedOrderIDs() bool { return s.keyed.Load() }

// Drain cuts every current and future wait short: requests answer with the
// state they have (202, 409, the pending order) instead of waiting. Called at
// shutdown so that in-flight requests finish quickly.
func (s *Service) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// connected waits, up to ReconnectGrace and the deadline, for a lost
// connection to come back; ErrUnavailable when it does not.
func (s *Service) connected(ctx context.Context, deadline time.Time) error {
	if s.cfg.Up == nil || s.cfg.Up().Err() == nil {
		return nil
	}
	until := time.Now().Add(s.cfg.ReconnectGrace)
	if deadline.Before(until) {
		until = deadline
	}
	for s.cfg.Up().Err() != nil {
		if time.Now().After(until) {
			return fmt.Errorf("%w: not connected to NATS", ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
	return nil
}

// attempt bounds one NATS call: attempt.Timeout (a second, growing by as
// much per attempt up to three), within the deadline, and less when the
// connection is lost meanwhile.
func (s *Service) attempt(ctx context.Context, deadline time.Time, n int) (context.Context, context.CancelFunc) {
	d := min(attempt.Timeout(n), time.Until(deadline))
	ctx, cancel := context.WithTimeout(ctx, d)
	if s.cfg.Up == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(s.cfg.Up(), cancel)
	return ctx, func() { stop(); cancel() }
}

// pause waits between attempts: 50ms doubling to 1s, cut short by the
// deadline. False when there is no time left.
func pause(ctx context.Context, deadline time.Time, n int) bool {
	d := min(50*time.Millisecond<<min(n-1, 5), time.Second)
	if time.Now().Add(d).After(deadline) {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// call runs a read (or any call that is safe to repeat), retrying while NATS
// is unavailable, within RequestTimeout.
func (s *Service) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(s.cfg.RequestTimeout)
	for n := 1; ; n++ {
		if err := s.connected(ctx, deadline); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		actx, cancel := s.attempt(ctx, deadline, n)
		err := f(actx)
		expired := actx.Err() != nil
		cancel()
		if err == nil {
			return nil
		}
		if !temporary(err) && !expired {
			return fmt.Errorf("%s: %w", op, err)
		}
		if ctx.Err() != nil || !pause(ctx, deadline, n) {
			return unavailable(op, err)
		}
	}
}

// publish stores cmd. While the outcome is unknown (an attempt that timed
// out may have stored it), it publishes the same command again: the broker's
// duplicate ack then tells the truth: duplicate is true only when another
// request's command holds the key, not when an earlier attempt stored cmd
// itself (see ownCommand). ErrOutcomeUnknown when the budget runs out after
// a command was sent, ErrUnavailable when nothing was.
func (s *Service) publish(ctx context.Context, cmd events.CreateOrder) (seq uint64, duplicate bool, err error) {
	deadline := time.Now().Add(s.cfg.RequestTimeout)
	sent := false
	for n := 1; ; n++ {
		if err := s.connected(ctx, deadline); err != nil {
			return 0, false, s.publishFailed(sent, err)
		}
		actx, cancel := s.attempt(ctx, deadline, n)
		seq, duplicate, err = s.deps.Commands.Publish(actx, cmd)
		expired := actx.Err() != nil
		cancel()
		if err == nil {
			s.stored.Add(1)
			if duplicate && sent && s.ownCommand(ctx, cmd, seq) {
				duplicate = false // an attempt whose ack was lost stored cmd
			}
			return seq, duplicate, nil
		}
		if !notStored(err) {
			sent = true
		}
		s.logger.DebugContext(ctx, "publish attempt failed", "attempt", n, "expired", expired, "err", err)
		if !temporary(err) && !expired {
			return 0, false, s.publishFailed(sent, err)
		}
		if ctx.Err() != nil || !pause(ctx, deadline, n) {
			return 0, false, s.publishFailed(sent, err)
		}
	}
}

// Stored counts the commands this service has stored (those the broker
// took for duplicates too): it grows while the API takes orders in, which
// the processor's yield looks at (server.Config.DecisionLag).
func (s *Service) Stored() uint64 { return s.stored.Load() }

func (s *Service) publishFailed(sent bool, err error) error {
	if sent {
		return fmt.Errorf("publish command: %w: %w", ErrOutcomeUnknown, err)
	}
	return unavailable("publish command", err)
}

// pollInterval is how long a waiter waits before reading the store itself.
func (s *Service) pollInterval() time.Duration {
	if s.deps.Watcher.Live() != nil {
		return s.cfg.DownPollInterval
	}
	return s.cfg.PollInterval
}
