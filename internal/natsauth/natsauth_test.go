package natsauth_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// startNATS runs an embedded server with the users of creds and orderly's
// topology, set up by the operator.
func startNATS(t *testing.T, creds natsauth.Credentials) string {
	t.Helper()
	url, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	orderlytest.Setup(t, url, creds, 0)
	return url
}

// client is a connection as one user that records the permission violations
// the server reports.
type client struct {
	user   string
	nc     *nats.Conn
	js     jetstream.JetStream
	denied chan string
}

func connect(t *testing.T, url string, creds natsauth.Credentials, user string) *client {
	t.Helper()
	c := &client{user: user, denied: make(chan string, 64)}
	key, err := nats.NkeyOptionFromSeed(creds.SeedPath(user))
	if err != nil {
		t.Fatal(err)
	}
	c.nc, err = nats.Connect(url, key, nats.CustomInboxPrefix(natsauth.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case c.denied <- err.Error():
				default:
				}
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(c.nc.Close)
	if c.js, err = jetstream.New(c.nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// allowed runs op and fails the test if it fails or the server reported a
// violation.
func (c *client) allowed(t *testing.T, what string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := op(ctx); err != nil {
		t.Errorf("%s: %s: %v, want it allowed", c.user, what, err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-c.denied:
		t.Errorf("%s: %s: %s, want it allowed", c.user, what, v)
	default:
	}
}

// refused runs op and fails the test unless the server reports a permission
// violation naming subject. (A refused publish or request fails op; a
// refused pull request leaves a fetch empty, which is not an error.)
func (c *client) refused(t *testing.T, what, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := op(ctx)
	deadline := time.After(2 * time.Second)
	for {
		select {
		case v := <-c.denied:
			if strings.Contains(v, subject) {
				return
			}
		case <-deadline:
			t.Errorf("%s: %s: the server reported no violation for %q (the operation returned %v)", c.user, what, subject, err)
			return
		}
	}
}

func publish(c *client, subject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(`{}`)})
		return err
	}
}

// corePublish publishes without waiting for a JetStream ack, as an ack
// or any other reply is sent.
func corePublish(c *client, subject string) func(ctx context.Context) error {
	return func(context.Context) error {
		if err := c.nc.Publish(subject, []byte("+ACK")); err != nil {
			return err
		}
		return c.nc.Flush()
	}
}

func deleteStream(c *client, name string) func(ctx context.Context) error {
	return func(ctx context.Context) error { return c.js.DeleteStream(ctx, name) }
}

func putResult(c *client) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		kv, err := c.js.KeyValue(ctx, events.ResultsBucket)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, "forged", []byte("x"))
		return err
	}
}

func getResult(c *client, key string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		kv, err := c.js.KeyValue(ctx, events.ResultsBucket)
		if err != nil {
			return err
		}
		_, err = kv.Get(ctx, key)
		return err
	}
}

// redirect tries to point orderly's durable consumer elsewhere: a filter on no
// command, which would silently stop all processing.
func redirect(c *client, stream, durable string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.js.UpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "nothing",
		})
		return err
	}
}

func fetch(c *client, stream, durable string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		cons, err := c.js.Consumer(ctx, stream, durable)
		if err != nil {
			return err
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			return err
		}
		for range batch.Messages() {
		}
		return batch.Error()
	}
}

func subscribe(c *client, subject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		sub, err := c.nc.SubscribeSync(subject)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := c.nc.Flush(); err != nil {
			return err
		}
		// A refused subscription is reported asynchronously; give it time.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := sub.NextMsg(10 * time.Millisecond); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		return nil
	}
}

// TestNoAnonymousOrUnknownUser: the server of every deployment refuses a
// connection without a key, with a key it does not know, and with a user's
// key whose seed is not the one it was given.
func TestNoAnonymousOrUnknownUser(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	url := startNATS(t, creds)

	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous: %v, want an authorization error", err)
	}

	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	stranger := filepath.Join(t.TempDir(), "stranger.nk")
	if err := os.WriteFile(stranger, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	opt, err := nats.NkeyOptionFromSeed(stranger)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(url, opt, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("an unknown key was accepted")
	}

	// A user/password pair is not a way in either.
	if nc, err := nats.Connect(url, nats.UserInfo("operator", "operator"), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a user and password were accepted")
	}
}

// TestEachUserMayDoItsJobAndNothingElse runs, for each user, what its role
// needs (allowed) and what a compromised process of that role would try
// (refused by the server): forge events or results, publish commands that
// skip the API, delete a stream, redirect or drain orderly's durable
// consumers, read another user's replies.
func TestEachUserMayDoItsJobAndNothingElse(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	url := startNATS(t, creds)
	event := events.EventSubject(events.KindCreated, "ord_forged")
	const commands, evs, results = events.CommandStream, events.EventStream, jsstore.ResultsStream
	const kvPut = "$KV." + events.ResultsBucket + ".forged"

	t.Run("api", func(t *testing.T) {
		c := connect(t, url, creds, natsauth.API)
		c.allowed(t, "publish a command", publish(c, events.CommandSubject))
		c.allowed(t, "read a result", func(ctx context.Context) error {
			if err := getResult(c, "absent")(ctx); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return err
			}
			return nil
		})
		// Its reads of what is stored delete their consumer when done.
		for _, stream := range []string{results, evs} {
			c.allowed(t, "follow "+stream+" and delete the consumer", func(ctx context.Context) error {
				cons, err := c.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
				if err != nil {
					return err
				}
				info, err := cons.Info(ctx)
				if err != nil {
					return err
				}
				return c.js.DeleteConsumer(ctx, stream, info.Name)
			})
		}
		c.refused(t, "publish an event", event, publish(c, event))
		c.refused(t, "replay a command under another order's ID", events.ReplaySubject, publish(c, events.ReplaySubject))
		c.refused(t, "write a result", kvPut, putResult(c))
		c.refused(t, "delete ORDER_EVENTS", "STREAM.DELETE."+evs, deleteStream(c, evs))
		c.refused(t, "redirect the processor's consumer", "CONSUMER.CREATE."+commands+"."+jsstore.ProcessorConsumer, redirect(c, commands, jsstore.ProcessorConsumer))
		c.refused(t, "take the processor's commands", commands+"."+jsstore.ProcessorConsumer, fetch(c, commands, jsstore.ProcessorConsumer))
		// It makes ordered consumers of ORDER_EVENTS, but none of them is
		// the projector's durable one.
		c.refused(t, "redirect orderly's projector", "CONSUMER.CREATE."+evs+"."+jsstore.ProjectorConsumer, redirect(c, evs, jsstore.ProjectorConsumer))
		c.refused(t, "delete the projector", "CONSUMER.DELETE."+evs+"."+jsstore.ProjectorConsumer, func(ctx context.Context) error {
			return c.js.DeleteConsumer(ctx, evs, jsstore.ProjectorConsumer)
		})
		c.refused(t, "take the projector's events", "CONSUMER.MSG.NEXT."+evs+"."+jsstore.ProjectorConsumer, fetch(c, evs, jsstore.ProjectorConsumer))
		c.refused(t, "read the operator's replies", "_INBOX.>", subscribe(c, "_INBOX.>"))
		c.refused(t, "read the processor's replies", "_INBOX_processor.>", subscribe(c, "_INBOX_processor.>"))
		c.refused(t, "listen to commands", events.CommandSubject, subscribe(c, events.CommandSubject))
	})

	t.Run("processor", func(t *testing.T) {
		c := connect(t, url, creds, natsauth.Processor)
		c.allowed(t, "publish an event", publish(c, event))
		c.allowed(t, "write a result", putResult(c))
		c.allowed(t, "dead-letter a command", publish(c, events.DeadLetterSubject))
		c.allowed(t, "take commands", fetch(c, commands, jsstore.ProcessorConsumer))
		c.allowed(t, "read its consumer's acknowledgement floor, which its events carry (ADR 0031)", func(ctx context.Context) error {
			_, err := c.js.Consumer(ctx, commands, jsstore.ProcessorConsumer)
			return err
		})
		c.refused(t, "publish a command", events.CommandSubject, publish(c, events.CommandSubject))
		c.refused(t, "delete ORDER_COMMANDS", "STREAM.DELETE."+commands, deleteStream(c, commands))
		c.refused(t, "redirect its own consumer", "CONSUMER.CREATE."+commands+"."+jsstore.ProcessorConsumer, redirect(c, commands, jsstore.ProcessorConsumer))
		c.refused(t, "take the projector's events", evs+"."+jsstore.ProjectorConsumer, fetch(c, evs, jsstore.ProjectorConsumer))
	})

	t.Run("projector", func(t *testing.T) {
		c := connect(t, url, creds, natsauth.Projector)
		c.allowed(t, "write a result", putResult(c))
		c.allowed(t, "take events", fetch(c, evs, jsstore.ProjectorConsumer))
		c.refused(t, "publish a command", events.CommandSubject, publish(c, events.CommandSubject))
		c.refused(t, "publish an event", event, publish(c, event))
		c.refused(t, "purge ORDER_EVENTS", "STREAM.PURGE."+evs, func(ctx context.Context) error {
			s, err := c.js.Stream(ctx, evs)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		})
	})

	t.Run("events", func(t *testing.T) {
		billing, err := jsstore.EventsConsumerConfig("billing", events.KindCreated, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := connect(t, url, creds, natsauth.Operator).js.CreateConsumer(context.Background(), evs, billing); err != nil {
			t.Fatal(err)
		}
		c := connect(t, url, creds, natsauth.Events)
		c.allowed(t, "read from the durable consumer the operator made for it", fetch(c, evs, "billing"))
		c.allowed(t, "read an event by its subject", func(ctx context.Context) error {
			s, err := c.js.Stream(ctx, evs)
			if err != nil {
				return err
			}
			if _, err := s.GetLastMsgForSubject(ctx, event); !errors.Is(err, jetstream.ErrMsgNotFound) {
				return err
			}
			return nil
		})
		c.refused(t, "create a consumer", "CONSUMER.CREATE."+evs+".mine", func(ctx context.Context) error {
			_, err := c.js.CreateConsumer(ctx, evs, jetstream.ConsumerConfig{Durable: "mine", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		})
		c.refused(t, "delete a consumer", "CONSUMER.DELETE."+evs+".billing", func(ctx context.Context) error {
			return c.js.DeleteConsumer(ctx, evs, "billing")
		})
		c.refused(t, "redirect orderly's projector", "CONSUMER.CREATE."+evs+"."+jsstore.ProjectorConsumer, redirect(c, evs, jsstore.ProjectorConsumer))
		c.refused(t, "take the projector's events", "CONSUMER.MSG.NEXT."+evs+"."+jsstore.ProjectorConsumer, fetch(c, evs, jsstore.ProjectorConsumer))
		// An ack's reply subject names the stream and consumer sequences
		// and the delivery count, which can be guessed.
		projectorAck := "$JS.ACK." + evs + "." + jsstore.ProjectorConsumer
		c.refused(t, "ack the projector's events", projectorAck, corePublish(c, projectorAck+".1.1.1.1700000000000000000.0"))
		c.refused(t, "delete the projector", "CONSUMER.DELETE."+evs+"."+jsstore.ProjectorConsumer, func(ctx context.Context) error {
			return c.js.DeleteConsumer(ctx, evs, jsstore.ProjectorConsumer)
		})
		c.refused(t, "publish an event", event, publish(c, event))
		c.refused(t, "publish a command", events.CommandSubject, publish(c, events.CommandSubject))
		c.refused(t, "read a result", "ORDER_RESULTS", getResult(c, "any"))
		c.refused(t, "read the commands", "STREAM.INFO."+commands, func(ctx context.Context) error {
			_, err := c.js.Stream(ctx, commands)
			return err
		})
	})

	t.Run("operator", func(t *testing.T) {
		c := connect(t, url, creds, natsauth.Operator)
		c.allowed(t, "change the dead-letter stream", func(ctx context.Context) error {
			s, err := c.js.Stream(ctx, events.DeadLetterStream)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		})
		c.allowed(t, "publish a command", publish(c, events.CommandSubject))
		c.allowed(t, "replay a command", publish(c, events.ReplaySubject))
	})
}

// TestRefusedCredentialsFailAtOnce: a role started without credentials, or
// with a key the server does not know, stops at once with a message that says
// what to pass, instead of waiting out --startup-timeout as it does for a
// server that is not up yet.
func TestRefusedCredentialsFailAtOnce(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	url := startNATS(t, creds)
	other := orderlytest.NewCredentials(t) // same users, other keys
	for _, c := range []jsstore.Credentials{{}, {NkeyFile: other.SeedPath(natsauth.API)}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		begin := time.Now()
		nc, err := jsstore.Connect(ctx, jsstore.ConnectConfig{URL: url, Name: "test", Credentials: c}, nil)
		cancel()
		if err == nil {
			nc.Close()
			t.Fatalf("%+v: connected", c)
		}
		if !errors.Is(err, jsstore.ErrCredentials) || !strings.Contains(err.Error(), "--nats-nkey") {
			t.Errorf("%+v: %v, want ErrCredentials naming --nats-nkey", c, err)
		}
		if el := time.Since(begin); el > 5*time.Second {
			t.Errorf("%+v: refused after %s; want at once", c, el)
		}
	}
}

// withBilling starts a NATS with orderly's users and topology, 3 commands
// and 3 events, and the operator's consumer billing on the events; it
// returns the server, the users and the operator's connection.
func withBilling(t *testing.T) (string, natsauth.Credentials, *client) {
	t.Helper()
	creds := orderlytest.NewCredentials(t)
	url := startNATS(t, creds)
	ctx := context.Background()
	operator := connect(t, url, creds, natsauth.Operator)
	for i := range 3 {
		if _, err := operator.js.Publish(ctx, events.CommandSubject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := operator.js.Publish(ctx, events.EventSubject(events.KindCreated, fmt.Sprintf("ord_%d", i)), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	billing, err := jsstore.EventsConsumerConfig("billing", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.js.CreateConsumer(ctx, events.EventStream, billing); err != nil {
		t.Fatal(err)
	}
	return url, creds, operator
}

// TestEventsUserCannotTakeTheProcessorsCommands: NATS checks no permission
// against a request's reply subject nor a push consumer's deliver subject, so
// a user of orderly's account that may pull from one consumer could have the
// server pull the processor's commands for it (the commands then wait out
// the ack wait, undecided, and count deliveries), by naming the processor's
// pull subject as the reply of its own pull, or as the deliver subject of a
// consumer it creates. The events user, whose key goes to other teams'
// services, is in an account of its own, where both lead nowhere.
func TestEventsUserCannotTakeTheProcessorsCommands(t *testing.T) {
	t.Parallel()
	url, creds, operator := withBilling(t)
	ctx := context.Background()
	processorsPull := "$JS.API.CONSUMER.MSG.NEXT." + events.CommandStream + "." + jsstore.ProcessorConsumer

	c := connect(t, url, creds, natsauth.Events)
	if err := c.nc.PublishMsg(&nats.Msg{
		Subject: "$JS.API.CONSUMER.MSG.NEXT." + events.EventStream + ".billing",
		Reply:   processorsPull,
		Data:    []byte(`{"batch":3}`),
	}); err != nil {
		t.Fatal(err)
	}
	pushCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, _ = c.js.CreateConsumer(pushCtx, events.EventStream, jetstream.ConsumerConfig{
		Durable: "push", DeliverSubject: processorsPull, AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// Whatever the server was made to do has happened after a second.
	time.Sleep(time.Second)
	cons, err := operator.js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); info.Delivered.Consumer != 0 || info.NumPending != 3 {
		t.Fatalf("the processor's consumer delivered %d commands to someone (%d of 3 left to deliver): the events user took them",
			info.Delivered.Consumer, info.NumPending)
	}
	if _, err := operator.js.Consumer(ctx, events.EventStream, "push"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the events user's push consumer: %v, want it never made", err)
	}
}

// TestEventsUserCannotReachTheProjectorThroughReplies: the exports to the
// events user's account name every consumer of ORDER_EVENTS (a wildcard),
// the optional projector's too, and its own user may not publish there. Nor
// does a reply reach it: the events user pulls from its consumer with the
// projector's pull subject as the reply, then with an ack subject of a
// delivery the projector holds. In one account the first would pull for the
// projector and the second ack its delivery; across the import, each reply
// stays in the events user's account.
func TestEventsUserCannotReachTheProjectorThroughReplies(t *testing.T) {
	t.Parallel()
	url, creds, operator := withBilling(t)
	ctx := context.Background()
	projector, err := operator.js.Consumer(ctx, events.EventStream, jsstore.ProjectorConsumer)
	if err != nil {
		t.Fatal(err)
	}
	// The projector holds one delivery, unacked.
	batch, err := projector.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	var held string
	for m := range batch.Messages() {
		held = m.Reply()
	}
	if held == "" {
		t.Fatalf("the projector got no delivery: %v", batch.Error())
	}

	c := connect(t, url, creds, natsauth.Events)
	for _, reply := range []string{"$JS.API.CONSUMER.MSG.NEXT." + events.EventStream + "." + jsstore.ProjectorConsumer, held} {
		if err := c.nc.PublishMsg(&nats.Msg{Subject: "$JS.API.CONSUMER.MSG.NEXT." + events.EventStream + ".billing", Reply: reply, Data: []byte(`{"batch":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // whatever the server was made to do has happened
	info, err := projector.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 1 || info.NumAckPending != 1 || info.AckFloor.Consumer != 0 {
		t.Fatalf("the projector's consumer: %d delivered, %d unacked, ack floor %d; want 1, 1, 0 (its own fetch, held)",
			info.Delivered.Consumer, info.NumAckPending, info.AckFloor.Consumer)
	}
}

// TestServiceKeysKeepServicesApart: a consumer service with a key of its own
// (AddService) reads ORDER_EVENTS and pulls from and acks its own consumer,
// and reaches nothing of another's: not by its subjects (no responder in its
// account), and not by the reply of its own pull (its account imports no other
// consumer's subjects). The events user, shared by the services without a
// key, keeps what it had for their consumers and reaches none of the others'
// (denied their subjects; a reply it names stays in its account).
func TestServiceKeysKeepServicesApart(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	for _, name := range []string{"billing", "ship-eu_1"} {
		if err := creds.AddService(name); err != nil {
			t.Fatal(err)
		}
	}
	if err := creds.AddService("billing"); !errors.Is(err, natsauth.ErrServiceExists) {
		t.Fatalf("billing again: %v, want ErrServiceExists", err)
	}
	for _, bad := range []string{"projector", "processor", "a.b", "*", ""} {
		if err := creds.AddService(bad); !errors.Is(err, jsstore.ErrEventsConsumerName) {
			t.Errorf("service %q: %v, want refused", bad, err)
		}
	}
	if err := creds.Check(); err != nil {
		t.Fatal(err)
	}
	// A hidden file there is left alone; anything else is not a service's.
	if err := os.WriteFile(filepath.Join(creds.Dir, natsauth.ServicesDir, ".DS_Store"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if names, err := creds.Services(); err != nil || strings.Join(names, ",") != "billing,ship-eu_1" {
		t.Fatalf("services: %v %v", names, err)
	}
	stray := filepath.Join(creds.Dir, natsauth.ServicesDir, "notes.txt")
	if err := os.WriteFile(stray, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := creds.Config(); err == nil || !strings.Contains(err.Error(), "notes.txt is not a service's seed") {
		t.Fatalf("the configuration with %s: %v, want it named", stray, err)
	}
	if err := os.Remove(stray); err != nil {
		t.Fatal(err)
	}
	url := startNATS(t, creds)
	ctx := context.Background()
	operator := connect(t, url, creds, natsauth.Operator)
	for _, name := range []string{"billing", "ship-eu_1"} {
		cfg, err := jsstore.EventsConsumerConfig(name, "", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := operator.js.CreateConsumer(ctx, events.EventStream, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := operator.js.Publish(ctx, events.EventSubject(events.KindCreated, fmt.Sprintf("ord_%d", i)), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	service := func(name string) (*nats.Conn, jetstream.JetStream) {
		js, err := jsstore.DialJetStream(url, jsstore.Credentials{NkeyFile: creds.ServiceSeedPath(name)}, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(js.Conn().Close)
		return js.Conn(), js
	}
	nc, billing := service("billing")
	if _, err := billing.Stream(ctx, events.EventStream); err != nil {
		t.Fatalf("billing reads ORDER_EVENTS: %v", err)
	}
	if _, err := billing.Stream(ctx, events.CommandStream); err == nil {
		t.Fatal("billing read ORDER_COMMANDS")
	}
	own, err := billing.Consumer(ctx, events.EventStream, "billing")
	if err != nil {
		t.Fatalf("billing binds to its consumer: %v", err)
	}
	batch, err := own.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("billing acks its event: %v", err)
		}
		got++
	}
	if got != 1 {
		t.Fatalf("billing fetched %d events, want 1: %v", got, batch.Error())
	}
	// Its user may not publish either (the request waits out its context),
	// and its account imports neither (nothing would answer).
	refused := func(what string, call func(context.Context) error) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := call(c); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("%s: %v, want it refused", what, err)
		}
	}
	refused("billing's bind to ship-eu_1's consumer", func(c context.Context) error {
		_, err := billing.Consumer(c, events.EventStream, "ship-eu_1")
		return err
	})
	refused("billing's consumer create", func(c context.Context) error {
		_, err := billing.CreateConsumer(c, events.EventStream, jetstream.ConsumerConfig{Durable: "mine"})
		return err
	})

	// ship-eu_1 holds one delivery; billing names its pull subject and that
	// delivery's ack subject as the replies of pulls from its own consumer.
	_, shipping := service("ship-eu_1")
	theirs, err := shipping.Consumer(ctx, events.EventStream, "ship-eu_1")
	if err != nil {
		t.Fatal(err)
	}
	held, err := theirs.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ackSubject string
	for m := range held.Messages() {
		ackSubject = m.Reply()
	}
	if ackSubject == "" {
		t.Fatalf("ship-eu_1 got no delivery: %v", held.Error())
	}
	for _, reply := range []string{"$JS.API.CONSUMER.MSG.NEXT." + events.EventStream + ".ship-eu_1", ackSubject} {
		if err := nc.PublishMsg(&nats.Msg{Subject: "$JS.API.CONSUMER.MSG.NEXT." + events.EventStream + ".billing", Reply: reply, Data: []byte(`{"batch":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// and the plain subjects of ship-eu_1's consumer
	_ = nc.Publish(ackSubject, nil)
	_ = nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+events.EventStream+".ship-eu_1", nc.NewRespInbox(), []byte(`{"batch":1}`))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // whatever the server was made to do has happened
	info, err := theirs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 1 || info.NumAckPending != 1 || info.AckFloor.Consumer != 0 {
		t.Fatalf("ship-eu_1's consumer: %d delivered, %d unacked, ack floor %d; want 1, 1, 0 (its own fetch, held)",
			info.Delivered.Consumer, info.NumAckPending, info.AckFloor.Consumer)
	}

	// The shared events user binds to a consumer of a service without a key
	// of its own, and may not use those of the services with one: not by
	// their subjects, and not by the replies of its own pulls.
	legacy, err := jsstore.EventsConsumerConfig("legacy", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.js.CreateConsumer(ctx, events.EventStream, legacy); err != nil {
		t.Fatal(err)
	}
	ev := connect(t, url, creds, natsauth.Events)
	if _, err := ev.js.Consumer(ctx, events.EventStream, "legacy"); err != nil {
		t.Fatalf("the events user binds to legacy: %v", err)
	}
	refused("the events user's bind to ship-eu_1, which has a key of its own", func(c context.Context) error {
		_, err := ev.js.Consumer(c, events.EventStream, "ship-eu_1")
		return err
	})
	for _, reply := range []string{"$JS.API.CONSUMER.MSG.NEXT." + events.EventStream + ".ship-eu_1", ackSubject} {
		if err := ev.nc.PublishMsg(&nats.Msg{Subject: "$JS.API.CONSUMER.MSG.NEXT." + events.EventStream + ".legacy", Reply: reply, Data: []byte(`{"batch":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = ev.nc.Publish(ackSubject, nil)
	_ = ev.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+events.EventStream+".ship-eu_1", ev.nc.NewRespInbox(), []byte(`{"batch":1}`))
	if err := ev.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if info, err := theirs.Info(ctx); err != nil {
		t.Fatal(err)
	} else if info.Delivered.Consumer != 1 || info.NumAckPending != 1 || info.AckFloor.Consumer != 0 {
		t.Fatalf("ship-eu_1's consumer after the events user: %d delivered, %d unacked, ack floor %d; want 1, 1, 0",
			info.Delivered.Consumer, info.NumAckPending, info.AckFloor.Consumer)
	}

	// Removed, the service's account is gone from the configuration.
	if err := creds.RemoveService("ship-eu_1"); err != nil {
		t.Fatal(err)
	}
	if err := creds.RemoveService("ship-eu_1"); !errors.Is(err, natsauth.ErrNoService) {
		t.Fatalf("ship-eu_1 again: %v, want ErrNoService", err)
	}
	conf, err := creds.Config()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(conf, natsauth.ServiceAccount("ship-eu_1")) || !strings.Contains(conf, natsauth.ServiceAccount("billing")) {
		t.Fatalf("the configuration after removing ship-eu_1:\n%s", conf)
	}
}

// TestRoutePasswordIsKeptAndPrivate: credentials init makes the route
// password once (random, mode 0600) and a fragment with its hash only; a
// second init changes neither; Check refuses a password others may read, a
// missing one, and one that is not hex (it goes into URLs).
func TestRoutePasswordIsKeptAndPrivate(t *testing.T) {
	t.Parallel()
	creds := natsauth.Credentials{Dir: t.TempDir()}
	if err := creds.Init(); err != nil {
		t.Fatal(err)
	}
	password, err := creds.RoutePassword()
	if err != nil {
		t.Fatal(err)
	}
	if len(password) != 64 {
		t.Fatalf("route password %d characters, want 64 hex digits", len(password))
	}
	st, err := os.Stat(creds.RoutePasswordPath())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("route password file: mode %v, want 0600", st.Mode().Perm())
	}
	fragment := creds.RouteConfigPath()
	conf, err := os.ReadFile(fragment)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(conf), password) || !strings.Contains(string(conf), `password: "$2`) || !strings.Contains(string(conf), "user: "+natsauth.RouteUser) {
		t.Fatalf("the route fragment, want the user and a bcrypt hash, not the password:\n%s", conf)
	}
	if err := creds.Init(); err != nil {
		t.Fatal(err)
	}
	if again, _ := creds.RoutePassword(); again != password {
		t.Fatal("a second init changed the route password")
	}
	if again, _ := os.ReadFile(fragment); string(again) != string(conf) {
		t.Fatal("a second init rewrote the route fragment")
	}
	// A fragment of another password is written again.
	if err := os.WriteFile(fragment, []byte("authorization {\n  user: route\n  password: \"$2a$10$aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := creds.Init(); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(fragment); string(again) == string(conf) || !strings.Contains(string(again), `password: "$2`) {
		t.Fatalf("the fragment of another password after init:\n%s", again)
	}
	if err := creds.Check(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(creds.RoutePasswordPath(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := creds.Check(); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("check with a readable route password: %v", err)
	}
	if err := os.WriteFile(creds.RoutePasswordPath(), []byte("route:pass@evil\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := creds.Check(); err == nil || !strings.Contains(err.Error(), "not a route password") {
		t.Fatalf("check with a password that is not hex: %v", err)
	}
	if err := os.Remove(creds.RoutePasswordPath()); err != nil {
		t.Fatal(err)
	}
	if err := creds.Check(); err == nil || !strings.Contains(err.Error(), natsauth.RoutePasswordFile) {
		t.Fatalf("check without a route password: %v", err)
	}
}

// TestRunShTakesTheRoutePasswordsCheckTakes: deploy/nats/run.sh starts
// nats-server only with a route password that orderly's Check takes (at
// least 32 hex digits), the one it puts into the route URLs. Before, it took
// any hex, so a truncated file started a node that orderly refused. It also
// refuses to start without the TLS files that node.conf names.
func TestRunShTakesTheRoutePasswordsCheckTakes(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, password string
		starts         bool
		tlsMissing     string // a TLS file removed after init
	}{
		{"from credentials init", "(init's)", true, ""},
		{"without the node's TLS key", "(init's)", false, natsauth.TLSNodeKeyFile},
		{"without the TLS CA", "(init's)", false, natsauth.TLSCAFile},
		{"32 hex digits", strings.Repeat("a1", 16), true, ""},
		{"31 hex digits", strings.Repeat("a", 31), false, ""},
		{"short", "abc", false, ""},
		{"empty", "\n", false, ""},
		{"not hex", strings.Repeat("A", 40), false, ""},
		{"a URL's characters", "route:pass@evil" + strings.Repeat("a", 32), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "run.sh"), script, 0o644); err != nil {
				t.Fatal(err)
			}
			creds := natsauth.Credentials{Dir: filepath.Join(dir, "credentials")}
			if err := creds.Init(); err != nil {
				t.Fatal(err)
			}
			if _, err := creds.InitTLS(nil); err != nil {
				t.Fatal(err)
			}
			if tc.tlsMissing != "" {
				if err := os.Remove(creds.TLSPath(tc.tlsMissing)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.password != "(init's)" {
				if err := os.WriteFile(creds.RoutePasswordPath(), []byte(tc.password+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, checkErr := creds.RoutePassword()
			// NATS_SERVER is a stand-in that prints the route URL run.sh
			// exported, so a start is seen without a server.
			stub := filepath.Join(dir, "nats-server")
			if err := os.WriteFile(stub, []byte("#!/bin/sh\nprintenv NATS_ROUTE_1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", filepath.Join(dir, "run.sh"))
			cmd.Env = append(os.Environ(), "NATS_SERVER="+stub, "NATS_ROUTE_1=127.0.0.1:1", "NATS_ROUTE_2=127.0.0.1:2", "NATS_ROUTE_3=127.0.0.1:3")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, runErr := cmd.Output()
			started := runErr == nil && strings.HasPrefix(string(out), "nats://route:")
			if started != tc.starts {
				t.Fatalf("run.sh started nats-server: %v, want %v (error %v, stderr %q)", started, tc.starts, runErr, stderr.String())
			}
			if tc.tlsMissing != "" {
				if !strings.Contains(stderr.String(), tc.tlsMissing+" is missing") {
					t.Fatalf("run.sh's refusal: %q, want the missing TLS file named", stderr.String())
				}
				return
			}
			if started != (checkErr == nil) {
				t.Fatalf("run.sh started: %v, but orderly's check says %v", started, checkErr)
			}
			if !started && !strings.Contains(stderr.String(), "at least 32 hex digits") {
				t.Fatalf("run.sh's refusal: %q, want the reason", stderr.String())
			}
		})
	}
}

// deployedCluster is deploy/nats/node.conf run by deploy/nats/run.sh, as
// the compose file and scripts/cluster.sh run them: three nats-server
// processes whose credentials (users and the route password) come from
// orderly credentials init.
type deployedCluster struct {
	t       *testing.T
	bin     string
	dir     string
	creds   natsauth.Credentials
	ports   orderlytest.Ports
	monitor []int
	env     [][]string
	nodes   []*exec.Cmd
}

func startDeployedCluster(t *testing.T) *deployedCluster {
	t.Helper()
	d := &deployedCluster{t: t, bin: orderlytest.NATSServerBinary(t), dir: t.TempDir(), ports: orderlytest.ClusterPorts(t, 3),
		monitor: make([]int, 3), env: make([][]string, 3), nodes: make([]*exec.Cmd, 3)}
	for _, f := range []string{"node.conf", "run.sh"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.creds = natsauth.Credentials{Dir: filepath.Join(d.dir, "credentials")}
	if err := d.creds.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.creds.InitTLS(nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d.monitor[i] = orderlytest.FreePort(t)
		d.env[i] = append(os.Environ(), "NATS_SERVER="+d.bin, fmt.Sprintf("NATS_NAME=nats-%d", i), fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", d.ports.Client[i]),
			fmt.Sprintf("NATS_HTTP=127.0.0.1:%d", d.monitor[i]), fmt.Sprintf("NATS_CLUSTER_LISTEN=127.0.0.1:%d", d.ports.Route[i]),
			"NATS_STORE_DIR="+t.TempDir())
		for j := range 3 {
			d.env[i] = append(d.env[i], fmt.Sprintf("NATS_ROUTE_%d=127.0.0.1:%d", j+1, d.ports.Route[j]))
		}
	}
	for i := range 3 {
		d.start(i)
	}
	t.Cleanup(func() {
		for _, cmd := range d.nodes {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	orderlytest.Setup(t, d.ports.URLs(), d.creds, 3)
	return d
}

// start runs node i (run.sh execs nats-server, so the process is the node).
func (d *deployedCluster) start(i int) {
	cmd := exec.Command("sh", filepath.Join(d.dir, "run.sh"))
	cmd.Env = d.env[i]
	if os.Getenv("ORDERLY_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.nodes[i] = cmd
}

func (d *deployedCluster) stop(i int) {
	_ = d.nodes[i].Process.Signal(syscall.SIGTERM)
	_ = d.nodes[i].Wait()
}

// routesFrom returns the names of the servers node i has a route with.
func (d *deployedCluster) routesFrom(i int) map[string]bool {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/routez", d.monitor[i]))
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var routez struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&routez); err != nil {
		d.t.Fatal(err)
	}
	names := make(map[string]bool)
	for _, r := range routez.Routes {
		names[r.RemoteName] = true
	}
	return names
}

// TestRoutesNeedThePassword: the deployed cluster's route port refuses a
// server that does not give the route password of orderly credentials init,
// or that does not speak TLS with a certificate of the cluster's CA, and
// takes one that does both (so the refusal is not a server that cannot
// connect at all). Before ADR 0024 any server that reached the port joined
// the cluster and saw every account's traffic; before ADR 0025 that traffic
// crossed the network in clear text.
func TestRoutesNeedThePassword(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nine nats-server processes; run without -short")
	}
	t.Parallel()
	d := startDeployedCluster(t)
	password, err := d.creds.RoutePassword()
	if err != nil {
		t.Fatal(err)
	}
	// The nodes' own routes, with the password run.sh put in their URLs.
	for i := range 3 {
		routes := d.routesFrom(i)
		for j := range 3 {
			if j != i && !routes[fmt.Sprintf("nats-%d", j)] {
				t.Fatalf("nats-%d has no route with nats-%d: %v", i, j, routes)
			}
		}
	}
	cluster := orderlytest.TLSFiles{CA: d.creds.TLSPath(natsauth.TLSCAFile), Cert: d.creds.TLSPath(natsauth.TLSNodeFile), Key: d.creds.TLSPath(natsauth.TLSNodeKeyFile)}
	// A server that names a route to every node, as one of the cluster's
	// own would, with TLS files (or none) on its routes.
	join := func(name, userinfo string, tls orderlytest.TLSFiles) {
		var routes []string
		for _, port := range d.ports.Route {
			routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats://%s127.0.0.1:%d", userinfo, port)))
		}
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\ncluster {\n  name: orderly\n  listen: 127.0.0.1:%d\n  routes: [%s]\n",
			name, orderlytest.FreePort(t), orderlytest.FreePort(t), strings.Join(routes, ", "))
		if tls.Cert != "" {
			conf += fmt.Sprintf("  tls { cert_file: %q, key_file: %q, ca_file: %q }\n", tls.Cert, tls.Key, tls.CA)
		}
		conf += "}\n"
		path := filepath.Join(t.TempDir(), "join.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(d.bin, "-c", path)
		if os.Getenv("ORDERLY_TEST_LOG") != "" {
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	withPassword := "route:" + password + "@"
	intruders := map[string]struct {
		userinfo string
		tls      orderlytest.TLSFiles
	}{
		"no-password":    {"", cluster},
		"wrong-password": {"route:" + strings.Repeat("0", len(password)) + "@", cluster},
		"other-user":     {"orderly:" + password + "@", cluster},
		"no-tls":         {withPassword, orderlytest.TLSFiles{}},
		"another-ca":     {withPassword, orderlytest.NewTLSFiles(t)},
	}
	for name, in := range intruders {
		join(name, in.userinfo, in.tls)
	}
	join("with-password", withPassword, cluster)
	// The intruders started first, so by the time the server with the
	// password is in, they have had as long to get in.
	orderlytest.Eventually(t, 30*time.Second, "the server with the route password and the cluster's certificate joins every node", func() bool {
		for i := range 3 {
			if !d.routesFrom(i)["with-password"] {
				return false
			}
		}
		return true
	})
	for i := range 3 {
		routes := d.routesFrom(i)
		for name := range intruders {
			if routes[name] {
				t.Errorf("nats-%d took a route from %s", i, name)
			}
		}
	}
}

// TestClientsNeedTLS: the deployed cluster's client port speaks TLS only:
// a client that trusts the cluster's CA (--nats-ca) gets in over TLS, one
// that does not is refused, naming the flag, and the port tells every
// client that TLS is required.
func TestClientsNeedTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes; run without -short")
	}
	t.Parallel()
	d := startDeployedCluster(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", d.ports.Client[0])
	nc, err := jsstore.Dial(url, orderlytest.As(d.creds, natsauth.Operator), "tls")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := nc.TLSConnectionState(); err != nil || !st.HandshakeComplete {
		t.Fatalf("the operator's connection is not over TLS: %v", err)
	}
	nc.Close()
	if _, err := jsstore.Dial(url, jsstore.Credentials{NkeyFile: d.creds.SeedPath(natsauth.Operator)}, "no-ca"); !errors.Is(err, jsstore.ErrTLS) || !strings.Contains(err.Error(), "--nats-ca") {
		t.Fatalf("a client without the CA: %v, want it refused, naming --nats-ca", err)
	}
	// A raw TCP client reads the server's INFO: TLS is required.
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", d.ports.Client[0]), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	info, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("the client port's INFO: %q %v, want tls_required", info, err)
	}
}

// TestNodeCertificateRenewsOnReload: the node certificate credentials init
// issues again (here for a new --tls-host) is taken by a node on SIGHUP,
// with no restart: new connections get the new certificate, the node keeps
// its routes, and clients trusting the same CA connect to every node, the
// reloaded ones and those still on the old certificate.
func TestNodeCertificateRenewsOnReload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes; run without -short")
	}
	t.Parallel()
	d := startDeployedCluster(t)
	serial := func(i int) string {
		t.Helper()
		nc, err := jsstore.Dial(fmt.Sprintf("nats://127.0.0.1:%d", d.ports.Client[i]), orderlytest.As(d.creds, natsauth.Operator), "renew")
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		defer nc.Close()
		st, err := nc.TLSConnectionState()
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		return st.PeerCertificates[0].SerialNumber.String()
	}
	old := serial(0)
	issued, err := d.creds.InitTLS([]string{"nats.example.com"})
	if err != nil || !issued.Node || issued.CA {
		t.Fatalf("init with a new host: %+v %v", issued, err)
	}
	if err := d.nodes[0].Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	orderlytest.Eventually(t, 10*time.Second, "node 0 presents the new certificate", func() bool { return serial(0) != old })
	if got := serial(1); got != old {
		t.Fatalf("node 1, not reloaded, presents %s, want the old certificate %s", got, old)
	}
	// The routes of the reloaded node, to both others, stay or come back.
	orderlytest.Eventually(t, 10*time.Second, "node 0 keeps its routes", func() bool {
		routes := d.routesFrom(0)
		return routes["nats-1"] && routes["nats-2"]
	})
}

// TestServiceKeyAfterRollingRestart: a service key added while a cluster
// runs is refused by the running nodes, and binds to its consumer once they
// have been restarted one at a time, as docs/operations.md says. The nodes run
// deploy/nats/node.conf, the compose file's and scripts/cluster.sh's, which
// includes credentials/nats-accounts.conf. (A configuration reload is not
// enough: with nats-server 2.15.2 the new account's key authenticated after
// SIGHUP on every node, and its requests had no responders 20 s later,
// nats-server issue 8560.)
func TestServiceKeyAfterRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts three nats-server processes; run without -short")
	}
	t.Parallel()
	d := startDeployedCluster(t)
	creds, ports := d.creds, d.ports
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	operator, err := jsstore.DialJetStream(ports.URLs(), orderlytest.As(creds, natsauth.Operator), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Conn().Close()
	cfg, err := jsstore.EventsConsumerConfig("billing", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.CreateConsumer(ctx, events.EventStream, cfg); err != nil {
		t.Fatal(err)
	}
	if err := creds.AddService("billing"); err != nil {
		t.Fatal(err)
	}
	bind := func() error {
		js, err := jsstore.DialJetStream(ports.URLs(), jsstore.Credentials{NkeyFile: creds.ServiceSeedPath("billing"), CAFile: creds.TLSPath(natsauth.TLSCAFile)}, "billing")
		if err != nil {
			return err
		}
		defer js.Conn().Close()
		bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
		defer bcancel()
		_, err = js.Consumer(bctx, events.EventStream, "billing")
		return err
	}
	if err := bind(); !errors.Is(err, jsstore.ErrCredentials) {
		t.Fatalf("the new key before the restarts: %v, want the credentials refused", err)
	}
	// One node at a time, each back in the cluster (its consumer info
	// answered through it) before the next stops.
	for i := range 3 {
		d.stop(i)
		d.start(i)
		orderlytest.Eventually(t, 60*time.Second, fmt.Sprintf("node %d back", i), func() bool {
			js, err := jsstore.DialJetStream(fmt.Sprintf("nats://127.0.0.1:%d", ports.Client[i]), orderlytest.As(creds, natsauth.Operator), "probe")
			if err != nil {
				return false
			}
			defer js.Conn().Close()
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			defer pcancel()
			_, err = js.Consumer(pctx, events.EventStream, "billing")
			return err == nil
		})
	}
	var last error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if last = bind(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key 30 s after the restarts: %v", last)
		}
	}
}
