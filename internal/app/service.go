// Package app holds the API's use cases: submit an order under an idempotency
// key, read an order, read its events. It knows the rules (when to replay, when
// to publish, how long to wait) and talks to NATS only through the small
// interfaces below; the HTTP layer turns its outcomes and errors into responses.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/projections"
)

// ReadModels reads ORDER_RESULTS. ok is false when the key has no value.
type ReadModels interface {
	Result(ctx context.Context, key string) (r projections.Result, ok bool, err error)
}

// Watcher is the process-wide watch of the read models (projections.Hub).
// WatchResult and WatchOrder must be called before the read or publish whose
// outcome they wait for: every update stored after the call is delivered.
type Watcher interface {
	CachedResult(key string) (projections.Result, bool)
	Remember(key string, r projections.Result)
	WatchResult(key string) *projections.Sub[projections.Result]
	WatchOrder(orderID string) *projections.Sub[struct{}]
}

// Published is the broker's answer to a command publish.
type Published struct {
	// Sequence is the command's stream sequence, or the original's for a duplicate.
	Sequence uint64
	// Duplicate is true when the broker dropped the command as a duplicate of one
	// stored earlier in the duplicate window.
	Duplicate bool
}

// Commands is ORDER_COMMANDS.
//
// Publish stores cmd with its KeyHash as Nats-Msg-Id and returns once the broker
// confirmed it (durably stored, or a duplicate). Command fetches the command at a
// stream sequence; FindCommand finds the command of an order, ok false when none.
type Commands interface {
	Publish(ctx context.Context, cmd events.CreateOrder) (Published, error)
	Command(ctx context.Context, seq uint64) (events.CreateOrder, error)
	FindCommand(ctx context.Context, orderID string) (cmd events.CreateOrder, ok bool, err error)
}

// EventLog reads ORDER_EVENTS. Event returns the terminal event of an order
// (ok false while it has none); OrderEvents returns all its events, oldest
// first, each as stored.
type EventLog interface {
	Event(ctx context.Context, orderID string) (data []byte, ok bool, err error)
	OrderEvents(ctx context.Context, orderID string) ([][]byte, error)
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

// Config configures the service.
type Config struct {
	// RequestTimeout bounds each NATS call made for a request.
	RequestTimeout time.Duration
	// Up, when set, returns a context that is canceled when the connection to
	// NATS is lost (and is canceled while it is down). Requests then fail at
	// once with ErrUnavailable instead of waiting out RequestTimeout.
	Up func() context.Context
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	if c.RequestTimeout <= 0 {
		return fmt.Errorf("request timeout must be positive, got %s", c.RequestTimeout)
	}
	return nil
}

// Service implements the use cases.
type Service struct {
	cfg      Config
	models   ReadModels
	watch    Watcher
	commands Commands
	events   EventLog
	logger   *slog.Logger
	now      func() time.Time
	newNonce func() string
	// draining is closed by Drain: waits end at once.
	draining  chan struct{}
	drainOnce sync.Once
}

// Drain cuts every current and future wait short: requests answer with the
// state they have (202, 409, the pending order) instead of waiting. Called at
// shutdown so that in-flight requests finish quickly.
func (s *Service) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// NewService returns the service.
func NewService(cfg Config, models ReadModels, watch Watcher, commands Commands, log EventLog, logger *slog.Logger) (*Service, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if models == nil || watch == nil || commands == nil || log == nil {
		errs = append(errs, errors.New("app: nil dependency"))
	}
	if logger == nil {
		errs = append(errs, errors.New("app: nil logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, models: models, watch: watch, commands: commands, events: log, logger: logger,
		now: time.Now, newNonce: events.NewNonce, draining: make(chan struct{})}, nil
}

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
