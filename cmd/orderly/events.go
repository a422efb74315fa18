package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/tail"
	"github.com/orderly-dev/orderly/internal/termsafe"
)

// EventsCmd groups the event tools.
type EventsCmd struct {
	Tail     EventsTailCmd     `cmd:"" help:"Print order events from ORDER_EVENTS (see docs/events.md)."`
	Consumer EventsConsumerCmd `cmd:"" help:"Make, list or remove the durable consumers consumer services read the events with (as the operator; the events user may not)."`
}

// EventsConsumerCmd groups orderly events consumer add, remove and list.
type EventsConsumerCmd struct {
	Add    EventsConsumerAddCmd    `cmd:"" help:"Create (or bring to these settings) a durable pull consumer on ORDER_EVENTS for a consumer service, which then binds to it by name with the events user's key (docs/events.md). Explicit acks, 30 s ack wait, never given up by the server, up to 1,000 events in flight."`
	Remove EventsConsumerRemoveCmd `cmd:"" help:"Delete a consumer service's durable consumer from ORDER_EVENTS (its position is lost)."`
	List   EventsConsumerListCmd   `cmd:"" help:"List the durable consumers on ORDER_EVENTS (the services', and orderly's projector if it has one): which events, how many are still to deliver, in flight and redelivered, and when each last delivered one."`
}

// EventsConsumerListCmd is orderly events consumer list.
type EventsConsumerListCmd struct {
	ToolNATS
	JSON bool `name:"json" help:"Print one JSON object per consumer."`
}

// eventsConsumer is one line of orderly events consumer list.
type eventsConsumer struct {
	Name         string     `json:"name"`
	Filter       string     `json:"filter"`
	Pending      uint64     `json:"pending"`
	InFlight     int        `json:"in_flight"`
	Redelivered  int        `json:"redelivered"`
	LastDelivery *time.Time `json:"last_delivery,omitempty"`
}

// Run lists the durable consumers.
func (c *EventsConsumerListCmd) Run(g *globals) error {
	js, closeNC, err := c.connectJS("orderly-events-consumer")
	if err != nil {
		return err
	}
	defer closeNC()
	s, err := js.Stream(g.ctx, events.EventStream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", events.EventStream, err)
	}
	var out []eventsConsumer
	list := s.ListConsumers(g.ctx)
	for ci := range list.Info() {
		if ci.Config.Durable == "" {
			continue // an ordered consumer of an API or a tool
		}
		ec := eventsConsumer{Name: ci.Name, Filter: strings.TrimSpace(ci.Config.FilterSubject + " " + strings.Join(ci.Config.FilterSubjects, " ")),
			Pending: ci.NumPending, InFlight: ci.NumAckPending, Redelivered: ci.NumRedelivered, LastDelivery: ci.Delivered.Last}
		if ci.Name == jsstore.ProjectorConsumer {
			ec.Name += " (orderly's)"
		}
		out = append(out, ec)
	}
	if err := list.Err(); err != nil {
		return err
	}
	slices.SortFunc(out, func(a, b eventsConsumer) int { return strings.Compare(a.Name, b.Name) })
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		for _, ec := range out {
			if err := enc.Encode(ec); err != nil {
				return err
			}
		}
		return nil
	}
	if len(out) == 0 {
		fmt.Printf("no durable consumers on %s (orderly events consumer add NAME makes one)\n", events.EventStream)
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tEVENTS\tPENDING\tIN FLIGHT\tREDELIVERED\tLAST DELIVERY")
	for _, ec := range out {
		last := "never"
		if ec.LastDelivery != nil {
			last = humanize.Time(*ec.LastDelivery)
		}
		// Names and filters are the server's; one made by a consumer service
		// before ADR 0021 may hold any byte NATS allows in a name.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", termsafe.String(ec.Name), termsafe.String(ec.Filter), humanize.Comma(int64(ec.Pending)), ec.InFlight, ec.Redelivered, last)
	}
	return tw.Flush()
}

// EventsConsumerAddCmd is orderly events consumer add.
type EventsConsumerAddCmd struct {
	ToolNATS
	Name string `arg:"" help:"The consumer's name, the service's (1 to 64 letters, digits, '-' or '_')."`
	Type string `name:"type" default:"all" enum:"all,created,rejected" help:"Which events it delivers: created, rejected or all."`
	New  bool   `name:"new" help:"Deliver only events stored after it is created (default: from the first stored event)."`
}

// Run creates or updates the consumer.
func (c *EventsConsumerAddCmd) Run(g *globals) error {
	kind, err := tail.ParseKind(c.Type)
	if err != nil {
		return err
	}
	cfg, err := jsstore.EventsConsumerConfig(c.Name, kind, c.New)
	if err != nil {
		return err
	}
	js, closeNC, err := c.connectJS("orderly-events-consumer")
	if err != nil {
		return err
	}
	defer closeNC()
	from := map[bool]string{false: "from the first stored event", true: "from its creation"}
	what := "created"
	if old, err := js.Consumer(g.ctx, events.EventStream, c.Name); err == nil {
		was := old.CachedInfo().Config
		if (was.DeliverPolicy == jetstream.DeliverNewPolicy) != c.New {
			return fmt.Errorf("consumer %s exists and delivers %s; where a consumer starts cannot change: remove it and add it again (its position is lost)",
				c.Name, from[was.DeliverPolicy == jetstream.DeliverNewPolicy])
		}
		what = "updated"
		if was.FilterSubject == cfg.FilterSubject && len(was.FilterSubjects) == 0 && was.AckPolicy == cfg.AckPolicy && was.AckWait == cfg.AckWait &&
			was.MaxDeliver == cfg.MaxDeliver && was.MaxAckPending == cfg.MaxAckPending && was.DeliverSubject == "" {
			what = "unchanged"
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %s: %w", c.Name, err)
	}
	if what != "unchanged" {
		if _, err := js.CreateOrUpdateConsumer(g.ctx, events.EventStream, cfg); err != nil {
			return fmt.Errorf("consumer %s: %w", c.Name, err)
		}
	}
	fmt.Printf("consumer %s on %s %s: %s, %s.\nThe service binds to it with a key of its own (orderly credentials service add %s) or the shared events user's: js.Consumer(ctx, %q, %q) (docs/events.md).\n",
		c.Name, events.EventStream, what, cfg.FilterSubject, from[c.New], c.Name, events.EventStream, c.Name)
	return nil
}

// EventsConsumerRemoveCmd is orderly events consumer remove.
type EventsConsumerRemoveCmd struct {
	ToolNATS
	Name string `arg:"" help:"The consumer's name."`
}

// Run deletes the consumer.
func (c *EventsConsumerRemoveCmd) Run(g *globals) error {
	if err := jsstore.CheckEventsConsumerName(c.Name); err != nil {
		return err
	}
	js, closeNC, err := c.connectJS("orderly-events-consumer")
	if err != nil {
		return err
	}
	defer closeNC()
	if err := js.DeleteConsumer(g.ctx, events.EventStream, c.Name); err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("%s has no consumer %s", events.EventStream, c.Name)
		}
		return fmt.Errorf("consumer %s: %w", c.Name, err)
	}
	fmt.Printf("consumer %s removed from %s.\n", c.Name, events.EventStream)
	return nil
}

// EventsTailCmd is orderly events tail.
type EventsTailCmd struct {
	ToolNATS
	Type   string        `name:"type" default:"all" enum:"all,created,rejected" help:"Which events: created, rejected or all."`
	Since  time.Duration `name:"since" xor:"start" placeholder:"DURATION" positive:"" help:"Only events of the last DURATION, such as 1h (default: every stored event)."`
	Last   *int          `name:"last" short:"n" xor:"start" placeholder:"N" help:"Only the last N matching events (then, with --follow, the new ones); 0 with --follow prints only new events."`
	Follow bool          `name:"follow" short:"f" help:"Keep printing new events until interrupted."`
	JSON   bool          `name:"json" help:"Print each event as stored (CloudEvents JSON), one per line (compacted, with characters that could control a terminal escaped)."`
	Read   string        `name:"read" default:"auto" enum:"auto,consumer,sequence" help:"How to read ORDER_EVENTS: consumer (an ordered consumer, which the operator's key may create), sequence (each event by its sequence, asking for new ones every 200 ms: all that a key that only reads ORDER_EVENTS may do), or auto: sequence for the events user's key (events.nk) and services' own keys (services/NAME.nk), else consumer."`
}

// Run prints the events.
func (c *EventsTailCmd) Run(g *globals) error {
	kind, err := tail.ParseKind(c.Type)
	if err != nil {
		return err
	}
	opts := tail.Options{Kind: kind, Since: c.Since, Follow: c.Follow, JSON: c.JSON, BySequence: c.Read == "sequence"}
	if c.Read == "auto" {
		opts.BySequence = readsOnly(c.creds().NkeyFile)
	}
	if c.Last != nil {
		if *c.Last < 0 {
			return fmt.Errorf("--last %d: N must be 0 or more", *c.Last)
		}
		opts.Last, opts.NewOnly = *c.Last, *c.Last == 0
	}
	js, closeNC, err := c.connectJS("orderly-events-tail")
	if err != nil {
		return err
	}
	defer closeNC()
	_, err = tail.Tail(g.ctx, js, opts, os.Stdout)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// readsOnly says whether the nkey seed at path is one that may read
// ORDER_EVENTS but not create consumers on it: the events user's
// (events.nk) or a consumer service's own (services/NAME.nk), by the names
// orderly gives them.
func readsOnly(path string) bool {
	if path == "" {
		return false
	}
	return filepath.Base(path) == natsauth.SeedFile(natsauth.Events) || filepath.Base(filepath.Dir(path)) == natsauth.ServicesDir
}

// ToolNATS locates orderly's NATS for the tools an operator runs.
type ToolNATS struct {
	NATSURL string `name:"nats-url" env:"ORDERLY_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS of orderly (orderly serve's embedded server listens on 127.0.0.1:4222)."`
	CredFlags
	InboxPrefix string `name:"nats-inbox-prefix" env:"ORDERLY_NATS_INBOX_PREFIX" help:"Subject prefix the NATS user may receive replies on. Default: _INBOX_<user> for orderly's <user>.nk seeds (but _INBOX for operator.nk), else _INBOX."`
}

// localOperatorKey is the operator's seed of an orderly serve started in this
// directory with the default --data-dir; tools use it when no credentials are
// given, and localCA, its embedded server's CA, when that server asks for TLS
// (serve --nats-tls) and no --nats-ca is given.
const (
	localOperatorKey = "data/credentials/operator.nk"
	localCA          = "data/credentials/" + natsauth.TLSCAFile
)

func (t ToolNATS) creds() jsstore.Credentials {
	c := t.credentials()
	if !c.Authenticated() {
		if _, err := os.Stat(localOperatorKey); err == nil {
			c.NkeyFile = localOperatorKey
			if _, err := os.Stat(localCA); err == nil && c.CAFile == "" {
				c.CAFile, c.CAIfAsked = localCA, true
			}
		}
	}
	c.InboxPrefix = t.InboxPrefix
	if user, ok := strings.CutSuffix(filepath.Base(c.NkeyFile), ".nk"); ok && c.InboxPrefix == "" && slices.Contains(natsauth.Users, user) {
		c.InboxPrefix = natsauth.InboxPrefix(user)
	}
	return c
}

// connectJS connects a tool to orderly's NATS.
func (t ToolNATS) connectJS(name string) (jetstream.JetStream, func(), error) {
	nc, err := t.dial(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jsstore.JetStreamIn(nc, t.JSDomain)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// dial connects a tool to orderly's NATS, and keeps the connection for
// explainDenied. A permissions violation on it ends the running command at
// once (toolConns.stop): the request the server refused would otherwise
// wait out its timeout, and the command fail after it anyway.
func (t ToolNATS) dial(name string) (*nats.Conn, error) {
	nc, err := jsstore.Dial(t.NATSURL, t.creds(), name)
	if err != nil {
		return nil, err
	}
	toolConns.Lock()
	toolConns.all = append(toolConns.all, nc)
	toolConns.Unlock()
	report := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			toolConns.Lock()
			stop := toolConns.stop
			toolConns.Unlock()
			if stop != nil {
				stop(err)
			}
		}
		if report != nil {
			report(c, sub, err)
		}
	})
	return nc, nil
}

// toolConns are the connections the tools made in this process, and stop,
// which ends the context of the running command (set by main).
var toolConns struct {
	sync.Mutex
	all  []*nats.Conn
	stop context.CancelCauseFunc
}

// useAnotherUser ends the error of a command the NATS user may not run.
const useAnotherUser = "; give a user that may, such as the operator (--nats-nkey .../operator.nk)"

// explainDenied adds to a tool's error the permissions violation behind it,
// if one of its connections met one: NATS refuses a request its user may not
// make by an error on the connection only, so the call itself fails with a
// timeout that says nothing of why.
func explainDenied(err error) error {
	toolConns.Lock()
	defer toolConns.Unlock()
	for _, nc := range toolConns.all {
		if explained := jsstore.WithDenied(err, nc); explained != err {
			// The command was ended for the violation (dial): its
			// "context canceled" says nothing the violation does not.
			msg := strings.Replace(explained.Error(), context.Canceled.Error()+": ", "", 1)
			return fmt.Errorf("%s%s", msg, useAnotherUser)
		}
	}
	return err
}
