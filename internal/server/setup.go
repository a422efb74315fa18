package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// SetupConfig configures Setup.
type SetupConfig struct {
	// Connect says where NATS is, with the operator's credentials.
	Connect jsstore.ConnectConfig
	// Topology is what to create or bring up to date.
	Topology jsstore.Topology
	// StartupTimeout bounds the wait for NATS and JetStream.
	StartupTimeout time.Duration
}

// Setup creates the streams, the bucket and the consumers that are missing
// and brings existing ones to what this version needs (jsstore.Topology),
// retrying with backoff while JetStream is unavailable (a cluster that is
// still forming), up to StartupTimeout. It needs the operator's rights: the
// roles may not change the topology.
func Setup(ctx context.Context, cfg SetupConfig, logger *slog.Logger) error {
	if cfg.Connect.Name == "" {
		cfg.Connect.Name = "setup"
	}
	// Before connecting: a topology that would be refused was found out
	// only once NATS answered, after up to the startup timeout without it.
	if err := cfg.Topology.Validate(); err != nil {
		return fmt.Errorf("invalid topology: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
	defer cancel()
	nc, err := jsstore.Connect(cctx, cfg.Connect, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jsstore.JetStreamIn(nc, cfg.Connect.Credentials.JSDomain)
	if err != nil {
		return err
	}
	start := time.Now()
	deadline := start.Add(cfg.StartupTimeout)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		// A forming cluster sometimes drops a request; retry it soon.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cfg.Topology.Ensure(tctx, js, logger)
		cancel()
		if err == nil {
			return nil
		}
		if denied := jsstore.Denied(nc); denied != nil {
			return fmt.Errorf("topology: the NATS user may not set it up (%w): orderly setup needs the operator's credentials", denied)
		}
		if !jsstore.IsUnavailable(err) || time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("topology: %w", err)
		}
		logger.Warn("waiting for JetStream to take the topology", "waited", time.Since(start).Round(time.Second), "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("topology: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// waitTopology waits, up to timeout, until what the roles need exists.
func waitTopology(ctx context.Context, js jetstream.JetStream, needs jsstore.Needs, timeout time.Duration, logger *slog.Logger) error {
	start := time.Now()
	deadline := start.Add(timeout)
	said := time.Time{}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := jsstore.Check(tctx, js, needs)
		cancel()
		if err == nil {
			return nil
		}
		if denied := jsstore.Denied(js.Conn()); denied != nil {
			return fmt.Errorf("topology: the NATS user may not read it (%w): give this role its own user's credentials", denied)
		}
		if !errors.Is(err, jsstore.ErrMissing) && !jsstore.IsUnavailable(err) || time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("topology: %w (run orderly setup with the operator's credentials)", err)
		}
		if time.Since(said) > 5*time.Second {
			said = time.Now()
			logger.Warn("waiting for the topology (orderly setup creates it, with the operator's credentials)",
				"waited", time.Since(start).Round(time.Second), "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topology: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}
