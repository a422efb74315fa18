package jsstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectConfig says how to reach NATS.
type ConnectConfig struct {
	// URL lists the servers, comma-separated. Ignored with InProcess.
	URL string
	// InProcess, when set, connects in process to an embedded server.
	InProcess nats.InProcessConnProvider
	// Name names the connection (shown by the server as orderly-<name>).
	Name string
}

// Connect opens a connection. It reconnects for ever; when the servers cannot
// be reached at first it keeps trying until ctx ends.
func Connect(ctx context.Context, cfg ConnectConfig, logger *slog.Logger) (*nats.Conn, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("component", "nats", "conn", cfg.Name)
	opts := []nats.Option{
		nats.Name("orderly-" + cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, 100*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// Pending publishes while disconnected are bounded by their own deadlines;
		// do not hold megabytes of them in memory.
		nats.ReconnectBufSize(1 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "url", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("NATS async error", "subject", subj, "err", err)
		}),
	}
	url := cfg.URL
	if cfg.InProcess != nil {
		opts = append(opts, nats.InProcessServer(cfg.InProcess))
		url = ""
	} else if url == "" {
		return nil, errors.New("no NATS URL and no embedded server")
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", url, err)
	}
	start, said := time.Now(), time.Now()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("connect to NATS %s: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			log.Warn("waiting for NATS", "url", url, "waited", time.Since(start).Round(time.Second))
		}
	}
	return nc, nil
}
