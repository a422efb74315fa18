// Package natsauth is orderly's NATS access model: the users, what each may
// publish and subscribe, their nkey seeds, and the nats-server configuration
// that declares them. The embedded server of `orderly serve`, the docker
// compose cluster and scripts/cluster.sh all load the configuration this
// package writes, so they cannot drift apart (ADR 0006).
//
// Everything lives in one account, ORDERLY, with JetStream, but the events
// user, which has an account of its own that imports only what it needs; a
// system account, SYS, serves `nats server` commands. There is no anonymous
// user. The users:
//
//   - operator: everything (setup, the tools, the nats CLI);
//   - api: publish commands, read the streams and the bucket, follow the
//     bucket and the events; not write events or results, nor change any
//     stream or durable consumer;
//   - processor: consume its durable consumer, claim keys, write events and
//     dead letters; not publish commands;
//   - projector: consume its durable consumer, write results; not publish
//     commands or events;
//   - serve: api, processor and projector together, for the one connection of
//     `orderly serve`;
//   - events: for services that consume the events (docs/events.md), in an
//     account of its own, ORDERLY_EVENTS (ADR 0021): read ORDER_EVENTS, pull
//     from and ack the durable consumers the operator made on it, but not
//     orderly's own projector, and create none;
//   - system: the SYS account, for `nats server report` and the like.
//
// Each user but operator and system receives replies on its own inbox prefix
// (_INBOX_<user>), so that no user can read another's replies.
//
// It may import events and internal/jsstore (for the names of the streams and
// consumers), and nothing else of orderly.
package natsauth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// Account names.
const (
	Account       = "ORDERLY"
	EventsAccount = "ORDERLY_EVENTS"
	SystemAccount = "SYS"
)

// eventsExports are the subjects ORDERLY exports to EventsAccount, as
// services, and that account imports under the same names: what a consumer
// service needs to read ORDER_EVENTS and to pull from and ack durable
// consumers the operator made for it (orderly events consumer add).
//
// The events user lives in an account of its own because NATS does not check
// the reply subject of a request against any permission: a user of ORDERLY
// allowed to pull from one consumer could name the processor's pull subject
// as the reply, and the server would then pull commands on the processor's
// consumer for it; one allowed to create consumers could do the same with a
// push consumer's deliver subject (nats-server issue 8274). Across accounts a
// request's reply subject is replaced by one that leads back to the
// importing account only.
//
// $JS.API.INFO is imported too, but not granted: an account that imports it
// gets no JetStream API of its own from the server (which would answer every
// other $JS.API subject with "JetStream not enabled for account").
var eventsExports = []struct {
	subject string
	stream  bool // responds with more than one message
	granted bool // the events user may publish it
}{
	{subject: jsAPI + "INFO"},
	{subject: jsAPI + "STREAM.INFO." + events.EventStream, granted: true},
	{subject: jsAPI + "DIRECT.GET." + events.EventStream, granted: true},
	{subject: jsAPI + "DIRECT.GET." + events.EventStream + ".>", granted: true},
	{subject: jsAPI + "STREAM.MSG.GET." + events.EventStream, granted: true},
	{subject: jsAPI + "CONSUMER.INFO." + events.EventStream + ".*", granted: true},
	{subject: jsAPI + "CONSUMER.MSG.NEXT." + events.EventStream + ".*", stream: true, granted: true},
	{subject: "$JS.ACK." + events.EventStream + ".>", granted: true},
}

// User names.
const (
	Operator  = "operator"
	API       = "api"
	Processor = "processor"
	Projector = "projector"
	Serve     = "serve"
	Events    = "events"
	System    = "system"
)

// Users lists every user, in the order of the configuration.
var Users = []string{Operator, API, Processor, Projector, Serve, Events, System}

// ConfigFile is the name of the configuration fragment in a credentials
// directory; SeedFile the name of a user's nkey seed.
const ConfigFile = "nats-accounts.conf"

// SeedFile is the file name of user's nkey seed in a credentials directory.
func SeedFile(user string) string { return user + ".nk" }

// InboxPrefix is the inbox prefix a user receives replies on.
func InboxPrefix(user string) string {
	if user == Operator || user == System {
		return "_INBOX"
	}
	return "_INBOX_" + user
}

// Permissions are what a user may publish and subscribe to.
type Permissions struct {
	Publish, Subscribe, DenyPublish []string
}

// JetStream API subjects.
const jsAPI = "$JS.API."

func streamInfo(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, jsAPI+"STREAM.INFO."+s)
	}
	return out
}

// read allows every way a message of stream is read by sequence or subject.
func read(stream string) []string {
	return []string{jsAPI + "DIRECT.GET." + stream, jsAPI + "DIRECT.GET." + stream + ".>", jsAPI + "STREAM.MSG.GET." + stream}
}

// follow allows ordered (ephemeral) consumers on stream.
func follow(stream string) []string {
	return []string{jsAPI + "CONSUMER.CREATE." + stream + ".>", jsAPI + "CONSUMER.DELETE." + stream + ".*",
		jsAPI + "CONSUMER.INFO." + stream + ".*", jsAPI + "CONSUMER.MSG.NEXT." + stream + ".*"}
}

// consume allows pulling from and acking the durable consumer of stream.
func consume(stream, durable string) []string {
	return []string{jsAPI + "CONSUMER.INFO." + stream + "." + durable, jsAPI + "CONSUMER.MSG.NEXT." + stream + "." + durable,
		"$JS.ACK." + stream + "." + durable + ".>"}
}

// durables denies changing orderly's durable consumers to users that may
// create ephemeral ones.
var durables = []string{
	jsAPI + "CONSUMER.CREATE." + events.CommandStream + "." + jsstore.ProcessorConsumer,
	jsAPI + "CONSUMER.CREATE." + events.CommandStream + "." + jsstore.ProcessorConsumer + ".>",
	jsAPI + "CONSUMER.CREATE." + events.EventStream + "." + jsstore.ProjectorConsumer,
	jsAPI + "CONSUMER.CREATE." + events.EventStream + "." + jsstore.ProjectorConsumer + ".>",
	jsAPI + "CONSUMER.DURABLE.CREATE.>",
	jsAPI + "CONSUMER.DELETE." + events.CommandStream + "." + jsstore.ProcessorConsumer,
	jsAPI + "CONSUMER.DELETE." + events.EventStream + "." + jsstore.ProjectorConsumer,
}

const resultsSubjects = "$KV." + events.ResultsBucket + ".>"

// Of returns the permissions of user; ok is false for an unknown user. The
// operator and system users have none: they may do everything.
func Of(user string) (p Permissions, ok bool) {
	common := func(u string) Permissions {
		return Permissions{Publish: []string{jsAPI + "INFO"}, Subscribe: []string{InboxPrefix(u) + ".>"}}
	}
	add := func(p *Permissions, subjects ...[]string) {
		for _, s := range subjects {
			p.Publish = append(p.Publish, s...)
		}
	}
	switch user {
	case API:
		p = common(API)
		add(&p, []string{events.CommandSubject}, streamInfo(events.CommandStream, events.EventStream, jsstore.ResultsStream),
			read(events.CommandStream), read(events.EventStream), read(jsstore.ResultsStream),
			follow(jsstore.ResultsStream), follow(events.EventStream))
		p.DenyPublish = durables
	case Processor:
		p = common(Processor)
		add(&p, []string{events.EventSubjects, resultsSubjects, events.DeadLetterSubjects},
			streamInfo(events.CommandStream, events.EventStream, jsstore.ResultsStream, events.DeadLetterStream),
			read(jsstore.ResultsStream), read(events.EventStream), consume(events.CommandStream, jsstore.ProcessorConsumer))
	case Projector:
		p = common(Projector)
		add(&p, []string{resultsSubjects}, streamInfo(events.EventStream, jsstore.ResultsStream),
			consume(events.EventStream, jsstore.ProjectorConsumer))
	case Serve:
		p = common(Serve)
		for _, u := range []string{API, Processor, Projector} {
			q, _ := Of(u)
			p.Publish = append(p.Publish, q.Publish...)
		}
		p.DenyPublish = durables // it consumes them; only the operator creates or changes them
	case Events:
		// In its own account: it may use only what ORDERLY exports to it
		// (eventsExports), and whatever reply subject it names is one of its
		// own account's.
		p = Permissions{Subscribe: []string{InboxPrefix(Events) + ".>"}}
		for _, e := range eventsExports {
			if e.granted {
				p.Publish = append(p.Publish, e.subject)
			}
		}
		p.DenyPublish = []string{
			jsAPI + "CONSUMER.MSG.NEXT." + events.EventStream + "." + jsstore.ProjectorConsumer,
			"$JS.ACK." + events.EventStream + "." + jsstore.ProjectorConsumer + ".>",
		}
	case Operator, System:
		return Permissions{}, true
	default:
		return Permissions{}, false
	}
	slices.Sort(p.Publish)
	p.Publish = slices.Compact(p.Publish)
	return p, true
}

// Credentials is a directory of user seeds and the configuration fragment.
type Credentials struct {
	// Dir holds <user>.nk (mode 0600) and nats-accounts.conf.
	Dir string
}

// Init creates the seeds that are missing (random, mode 0600) and writes the
// configuration fragment for the seeds there are. It is idempotent: existing
// seeds are kept, so that running it again changes no secret.
func (c Credentials) Init() error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	for _, u := range Users {
		path := filepath.Join(c.Dir, SeedFile(u))
		if _, err := os.Stat(path); err == nil {
			continue
		}
		kp, err := nkeys.CreateUser()
		if err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return err
		}
		if err := writeFile(path, seed, 0o600); err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
	}
	conf, err := c.Config()
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(c.Dir, ConfigFile), []byte(conf), 0o644)
}

// writeFile writes data to path atomically (a temporary file renamed).
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// SeedPath is the path of user's seed file.
func (c Credentials) SeedPath(user string) string { return filepath.Join(c.Dir, SeedFile(user)) }

// ConfigPath is the path of the configuration fragment.
func (c Credentials) ConfigPath() string { return filepath.Join(c.Dir, ConfigFile) }

// PublicKey reads user's seed and returns its public key.
func (c Credentials) PublicKey(user string) (string, error) {
	seed, err := os.ReadFile(c.SeedPath(user))
	if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.SeedPath(user), err)
	}
	return kp.PublicKey()
}

// Config renders the nats-server configuration fragment: the accounts, the
// users with their public keys and permissions, and the system account.
func (c Credentials) Config() (string, error) {
	var b strings.Builder
	b.WriteString("# Written by orderly (internal/natsauth): orderly's NATS accounts, users and permissions.\n")
	b.WriteString("# Public keys only; the seeds are the *.nk files beside it. Include it from a server's config.\n")
	fmt.Fprintf(&b, "accounts {\n  %s {\n    jetstream: enabled\n    users: [\n", Account)
	for _, u := range Users {
		if u == System || u == Events {
			continue
		}
		if err := c.user(&b, u); err != nil {
			return "", err
		}
	}
	b.WriteString("    ]\n    # For the consumer services of the events user, in an account of its own.\n    exports: [\n")
	for _, e := range eventsExports {
		fmt.Fprintf(&b, "      { service: %q", e.subject)
		if e.stream {
			b.WriteString(", response_type: stream")
		}
		fmt.Fprintf(&b, ", accounts: [%s] }\n", EventsAccount)
	}
	fmt.Fprintf(&b, "    ]\n  }\n  %s {\n    users: [\n", EventsAccount)
	if err := c.user(&b, Events); err != nil {
		return "", err
	}
	b.WriteString("    ]\n    imports: [\n")
	for _, e := range eventsExports {
		fmt.Fprintf(&b, "      { service: { account: %s, subject: %q } }\n", Account, e.subject)
	}
	pub, err := c.PublicKey(System)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    ]\n  }\n  %s {\n    users: [\n      # %s\n      { nkey: %s }\n    ]\n  }\n}\nsystem_account: %s\n", SystemAccount, System, pub, SystemAccount)
	return b.String(), nil
}

// user writes u's entry of an account's users.
func (c Credentials) user(b *strings.Builder, u string) error {
	pub, err := c.PublicKey(u)
	if err != nil {
		return err
	}
	p, _ := Of(u)
	fmt.Fprintf(b, "      # %s\n      { nkey: %s", u, pub)
	if u != Operator {
		fmt.Fprintf(b, ",\n        permissions: {\n          publish: { allow: %s", list(p.Publish))
		if len(p.DenyPublish) > 0 {
			fmt.Fprintf(b, ", deny: %s", list(p.DenyPublish))
		}
		fmt.Fprintf(b, " }\n          subscribe: { allow: %s }\n        }\n      ", list(p.Subscribe))
	}
	b.WriteString("}\n")
	return nil
}

func list(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = `"` + s + `"`
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// ErrNoSeed is returned by Check for a directory without a user's seed.
var ErrNoSeed = errors.New("no seed")

// Check reports whether every user's seed is present and readable by this
// process only (mode 0600 or stricter).
func (c Credentials) Check() error {
	var errs []error
	for _, u := range Users {
		st, err := os.Stat(c.SeedPath(u))
		if err != nil {
			errs = append(errs, fmt.Errorf("%w for %s: %v", ErrNoSeed, u, err))
			continue
		}
		if st.Mode().Perm()&0o077 != 0 {
			errs = append(errs, fmt.Errorf("%s is readable by others (mode %v): chmod 600 it", c.SeedPath(u), st.Mode().Perm()))
		}
	}
	return errors.Join(errs...)
}
