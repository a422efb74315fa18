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
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// Results reads the key records of ORDER_RESULTS; ok is false when the key
// has none.
type Results interface {
	Get(ctx context.Context, key string) (rec idempotency.Record, ok bool, err error)
}

// Cache is the process's memory of completed records: a completed record does
// not change until it expires, so a remembered one answers a replay without a
// round trip.
type Cache interface {
	CachedResult(key string) (idempotency.Record, bool)
	Remember(key string, rec idempotency.Record)
}

// Watcher delivers what is stored from the moment of the call on: WatchResult
// the records of a key, WatchOrder a signal when an order is decided. Call it
// before the read or publish whose outcome it waits for. The channel holds the
// latest update not yet read; cancel unregisters.
type Watcher interface {
	WatchResult(key string) (c <-chan idempotency.Record, cancel func())
	WatchOrder(orderID string) (c <-chan struct{}, cancel func())
}

// Commands is ORDER_COMMANDS.
//
// Publish stores cmd with its KeyHash as Nats-Msg-Id and returns once the
// broker confirmed it: durably stored (its sequence), or a duplicate of one
// stored in the window (duplicate true, the original's sequence). Command
// reads the command at a stream sequence; FindCommand the command of an order,
// ok false when there is none.
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
}

// Errors of the use cases. The HTTP layer maps them to statuses.
var (
	// ErrUnavailable: NATS did not answer in time; nothing was half-done, so the
	// client may retry with the same key.
	ErrUnavailable = errors.New("order store unavailable")
	// ErrNotFound: no such order for this tenant.
	ErrNotFound = errors.New("order not found")
)

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
	// RequestTimeout bounds each NATS call made for a request (default 2s).
	RequestTimeout time.Duration
	// Up, when set, returns a context that is canceled when the connection to
	// NATS is lost (and is canceled while it is down). Requests then fail at
	// once with ErrUnavailable instead of waiting out RequestTimeout.
	Up func() context.Context
}

func (c *Config) setDefaults() {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 2 * time.Second
	}
}

// Validate reports every problem with c; zero fields count as their defaults.
func (c Config) Validate() error {
	c.setDefaults()
	if c.RequestTimeout <= 0 {
		return fmt.Errorf("request timeout must be positive, got %s", c.RequestTimeout)
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
	return &Service{cfg: cfg, deps: deps, logger: logger,
		now: time.Now, newNonce: events.NewNonce, draining: make(chan struct{})}, nil
}

// Drain cuts every current and future wait short: requests answer with the
// state they have (202, 409, the pending order) instead of waiting. Called at
// shutdown so that in-flight requests finish quickly.
func (s *Service) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// available fails fast while NATS is known to be unreachable.
func (s *Service) available() error {
	if s.cfg.Up != nil && s.cfg.Up().Err() != nil {
		return fmt.Errorf("%w: not connected to NATS", ErrUnavailable)
	}
	return nil
}

// timeout bounds one NATS call: RequestTimeout, or less when the connection is
// lost meanwhile.
func (s *Service) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	if s.cfg.Up == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(s.cfg.Up(), cancel)
	return ctx, func() { stop(); cancel() }
}
