package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/tail"
)

// EventsCmd groups the event tools.
type EventsCmd struct {
	Tail EventsTailCmd `cmd:"" help:"Print order events from ORDER_EVENTS (see docs/events.md)."`
}

// EventsTailCmd is orderly events tail.
type EventsTailCmd struct {
	NATSURL string        `name:"nats-url" env:"ORDERLY_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS of orderly (the embedded server of 'orderly serve' listens on 127.0.0.1:4222)."`
	Type    string        `name:"type" default:"all" enum:"all,created,rejected" help:"Which events: created, rejected or all."`
	Since   time.Duration `name:"since" default:"0s" help:"Only events of the last DURATION, such as 1h; 0 prints every stored event."`
	Follow  bool          `name:"follow" short:"f" help:"Keep printing new events until interrupted."`
	JSON    bool          `name:"json" help:"Print each event as stored (CloudEvents JSON), one per line."`
}

// Run prints the events.
func (c *EventsTailCmd) Run(g *globals) error {
	kind, err := tail.ParseKind(c.Type)
	if err != nil {
		return err
	}
	js, closeNC, err := connectJS(c.NATSURL, "orderly-events-tail")
	if err != nil {
		return err
	}
	defer closeNC()
	_, err = tail.Tail(g.ctx, js, tail.Options{Kind: kind, Since: c.Since, Follow: c.Follow, JSON: c.JSON}, os.Stdout)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// connectJS connects a tool to orderly's NATS.
func connectJS(url, name string) (jetstream.JetStream, func(), error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}
