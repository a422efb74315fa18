// Command consumer is a downstream service that consumes orderly's OrderCreated
// events, written the way a team that only has docs/events.md would write it:
// its own durable pull consumer on ORDER_EVENTS, explicit acks after the work
// is done, duplicates dropped by event ID.
//
//	go run ./cmd/orderly events consumer add example-billing --type created
//	go run ./examples/consumer --nats-url nats://127.0.0.1:4222 --nats-nkey data/credentials/events.nk
//
// Against a cluster made from deploy/nats/node.conf, which speaks TLS only,
// add --nats-ca with the tls-ca.pem of its credentials directory.
//
// orderly's NATS admits no anonymous client: the events user may read the
// events and pull from and ack the durable consumers orderly's operator made
// for it, nothing else, and receives replies on the inbox prefix _INBOX_events.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
)

func main() {
	url := flag.String("nats-url", "nats://127.0.0.1:4222", "NATS of orderly")
	seed := flag.String("nats-nkey", "data/credentials/events.nk", "nkey seed file of orderly's events user")
	durable := flag.String("durable", "example-billing", "name of this service's durable consumer")
	ca := flag.String("nats-ca", "", "PEM file of the CA of a cluster that speaks TLS (tls-ca.pem of orderly credentials init)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	auth, err := nats.NkeyOptionFromSeed(*seed)
	if err != nil {
		log.Fatal(err)
	}
	opts := append(Options(end), nats.Name(*durable), auth)
	if *ca != "" {
		opts = append(opts, nats.RootCAs(*ca))
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	err = Run(ctx, js, *durable, NewMemorySeen(), func(_ context.Context, o events.OrderCreated) error {
		fmt.Printf("bill %s: customer %s, %s\n", o.OrderID, o.CustomerID, events.FormatAmount(o.Total, o.Currency))
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// InboxPrefix is where orderly's events user may receive replies.
const InboxPrefix = "_INBOX_events"

// Seen remembers the IDs of handled events. A real service stores the ID in the
// same transaction as its work (a unique column, say), so that a redelivery after
// a crash between the work and the ack is recognised.
type Seen interface {
	// Seen reports whether id was handled.
	Seen(id string) bool
	// Mark records id as handled.
	Mark(id string)
}

// MemorySeen is a Seen in memory, enough for the example.
type MemorySeen struct {
	mu  sync.Mutex
	ids map[string]bool
}

// NewMemorySeen returns an empty MemorySeen.
func NewMemorySeen() *MemorySeen { return &MemorySeen{ids: map[string]bool{}} }

// Seen reports whether id was handled.
func (m *MemorySeen) Seen(id string) bool { m.mu.Lock(); defer m.mu.Unlock(); return m.ids[id] }

// Mark records id as handled.
func (m *MemorySeen) Mark(id string) { m.mu.Lock(); defer m.mu.Unlock(); m.ids[id] = true }

// Options are the connection options of a service that consumes for as long
// as it runs: it receives replies on the events user's inbox prefix, ends
// (end) on a permissions violation (StopWhenDenied) or when the connection is
// closed for good (it then exits, and its supervisor starts it again),
// reconnects for ever (nats.go's default gives up after 60 tries, 2 minutes
// of an outage, and the service would then wait for events that never come),
// and pings its server every 5 s, so that a server that hangs without
// closing the connection (a frozen host, a network that drops every byte) is
// left within 15 s instead of nats.go's 4 to 6 minutes.
func Options(end context.CancelCauseFunc) []nats.Option {
	return []nats.Option{
		nats.CustomInboxPrefix(InboxPrefix),
		nats.ErrorHandler(StopWhenDenied(end)),
		nats.ClosedHandler(func(nc *nats.Conn) {
			err := nc.LastError()
			if err == nil {
				err = nats.ErrConnectionClosed
			}
			end(fmt.Errorf("%w: %w", errClosed, err))
		}),
		nats.MaxReconnects(-1),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(2),
	}
}

// errClosed is the cause of a service's end when its connection was closed
// for good.
var errClosed = errors.New("the NATS connection was closed")

// StopWhenDenied is the connection's error handler: it ends the service's
// context with a permissions violation as its cause, and logs other errors.
// NATS refuses what a key may not do by an error on the connection only; the
// refused request itself waits out its timeout and says nothing of why, and
// a service that may not pull or ack its consumer would wait for events that
// never come.
func StopWhenDenied(stop context.CancelCauseFunc) nats.ErrHandler {
	return func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			stop(err)
			return
		}
		log.Printf("NATS: %v", err)
	}
}

// Run consumes OrderCreated events with the durable consumer named durable until
// ctx ends. handle is called once per event; when it fails the event is naked
// and comes again. Events already seen are acked without calling handle. When
// ctx ends for a permissions violation (StopWhenDenied) or a connection
// closed for good (Options), Run's error says so.
func Run(ctx context.Context, js jetstream.JetStream, durable string, seen Seen, handle func(context.Context, events.OrderCreated) error) error {
	cons, err := js.Consumer(ctx, events.EventStream, durable)
	if denial := denied(ctx, durable); denial != nil {
		return denial
	}
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%s has no consumer %s: orderly's operator makes it with: orderly events consumer add %s --type created", events.EventStream, durable, durable)
	}
	if err != nil {
		return fmt.Errorf("consumer %s: %w", durable, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev events.Event[events.OrderCreated]
		if err := json.Unmarshal(m.Data(), &ev); err != nil || ev.Type != events.OrderCreatedType {
			// Not an event this service understands (a newer version, say): skip it.
			_ = m.Ack()
			return
		}
		if seen.Seen(ev.ID) {
			_ = m.Ack() // a redelivery of an event already handled
			return
		}
		if err := handle(ctx, ev.Data); err != nil {
			_ = m.NakWithDelay(time.Second)
			return
		}
		seen.Mark(ev.ID)
		_ = m.DoubleAck(ctx) // ack after the work is done; confirmed by the server
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); errors.Is(cause, errClosed) {
		cc.Stop() // nothing to drain: the connection is gone
		return fmt.Errorf("consumer %s: %w", durable, cause)
	}
	cc.Drain()
	<-cc.Closed()
	if denial := denied(ctx, durable); denial != nil {
		return denial
	}
	return ctx.Err()
}

// denied is the error of a service whose context a permissions violation
// ended, or nil.
func denied(ctx context.Context, durable string) error {
	cause := context.Cause(ctx)
	if !errors.Is(cause, nats.ErrPermissionViolation) {
		return nil
	}
	return fmt.Errorf("consumer %s: NATS refused this key (%w): a service's own key (orderly credentials service add NAME) reaches only the consumer NAME, and events.nk no consumer of a service that has a key of its own", durable, cause)
}
