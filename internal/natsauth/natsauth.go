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
//   - system: the SYS account, for `nats server report` and the like;
//   - a consumer service with a key of its own (AddService, ADR 0022): one
//     user in an account of its own, ORDERLY_SERVICE_<name>, that reads
//     ORDER_EVENTS and pulls from and acks the consumer <name> only.
//
// Each user but operator and system receives replies on its own inbox prefix
// (_INBOX_<user>), so that no user can read another's replies.
//
// The nodes of a cluster also take routes from one user only, with the
// random password Init writes beside the seeds (ADR 0024).
//
// It may import events and internal/jsstore (for the names of the streams and
// consumers), and nothing else of orderly.
package natsauth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/filesync"
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
//
// A consumer service with a key of its own (AddService) has an account of
// its own too, which imports the same reads but the consumer subjects of its
// own consumer only (the service form, with the service's name for %s), each
// exported to that account alone: nothing it names, as a subject or as a
// reply, reaches another service's consumer.
var eventsExports = []struct {
	subject string
	service string // the subject for one consumer service; empty: the same
	stream  bool   // responds with more than one message
	granted bool   // the events user may publish it
}{
	{subject: jsAPI + "INFO"},
	{subject: jsAPI + "STREAM.INFO." + events.EventStream, granted: true},
	{subject: jsAPI + "DIRECT.GET." + events.EventStream, granted: true},
	{subject: jsAPI + "DIRECT.GET." + events.EventStream + ".>", granted: true},
	{subject: jsAPI + "STREAM.MSG.GET." + events.EventStream, granted: true},
	{subject: jsAPI + "CONSUMER.INFO." + events.EventStream + ".*", service: jsAPI + "CONSUMER.INFO." + events.EventStream + ".%s", granted: true},
	{subject: jsAPI + "CONSUMER.MSG.NEXT." + events.EventStream + ".*", service: jsAPI + "CONSUMER.MSG.NEXT." + events.EventStream + ".%s", stream: true, granted: true},
	{subject: "$JS.ACK." + events.EventStream + ".>", service: "$JS.ACK." + events.EventStream + ".%s.>", granted: true},
}

// serviceSubject is export e's subject for consumer service name.
func serviceSubject(subject, service, name string) string {
	if service == "" {
		return subject
	}
	return fmt.Sprintf(service, name)
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

// The routes of a NATS cluster (deploy/nats/node.conf) authenticate as one
// user, RouteUser, with the random password in RoutePasswordFile (mode 0600).
// Every node's cluster block includes RouteConfigFile, which holds its bcrypt
// hash; deploy/nats/run.sh puts the password into the route URLs, the only
// place nats-server takes a route's credentials from (ADR 0024).
const (
	RouteUser         = "route"
	RoutePasswordFile = "route.password"
	RouteConfigFile   = "nats-route.conf"
)

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
		// Its ordered consumers of ORDER_EVENTS may take any name but the
		// projector's: it may not change or delete that one, nor pull from it.
		p.DenyPublish = slices.Concat(durables, []string{jsAPI + "CONSUMER.MSG.NEXT." + events.EventStream + "." + jsstore.ProjectorConsumer})
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
	// Dir holds <user>.nk and route.password (mode 0600), nats-accounts.conf
	// and nats-route.conf.
	Dir string
}

// Init creates the seeds and the route password that are missing (random,
// mode 0600) and writes the configuration fragments for the secrets there
// are. It is idempotent: existing secrets are kept, so that running it again
// changes none.
func (c Credentials) Init() error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	for _, u := range Users {
		path := filepath.Join(c.Dir, SeedFile(u))
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := newSeed(path); err != nil {
			return err
		}
	}
	if err := c.initRoute(); err != nil {
		return err
	}
	conf, err := c.Config()
	if err != nil {
		return err
	}
	return filesync.WriteFile(filepath.Join(c.Dir, ConfigFile), []byte(conf), 0o644)
}

// initRoute creates the route password if it is missing, and writes the
// route fragment if it is missing or holds another password's hash.
func (c Credentials) initRoute() error {
	if _, err := os.Stat(c.RoutePasswordPath()); err != nil {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
		// Hex: it goes into URLs and a config file without escaping.
		if err := filesync.WriteFile(c.RoutePasswordPath(), []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
	}
	password, err := c.RoutePassword()
	if err != nil {
		return err
	}
	if hash, err := routeHash(c.RouteConfigPath()); err == nil && bcrypt.CompareHashAndPassword(hash, []byte(password)) == nil {
		return nil
	}
	// The lowest cost: a hash's cost slows the guessing of a chosen
	// password, and this one is 256 random bits, which no guessing finds.
	// Every init and every route's connect pays it (about 1 ms, not 60).
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	conf := fmt.Sprintf("# Written by orderly (internal/natsauth): who may open a route to this node.\n"+
		"# Include it in the cluster block of every node; the password is %s beside it.\n"+
		"authorization {\n  user: %s\n  password: %q\n}\n", RoutePasswordFile, RouteUser, hash)
	return filesync.WriteFile(c.RouteConfigPath(), []byte(conf), 0o644)
}

// routeHash reads the bcrypt hash of a route fragment.
func routeHash(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "password: "); ok {
			return []byte(strings.Trim(v, `"`)), nil
		}
	}
	return nil, errors.New("no password")
}

// RouteConfigPath is the path of the route fragment.
func (c Credentials) RouteConfigPath() string { return filepath.Join(c.Dir, RouteConfigFile) }

// RoutePasswordPath is the path of the route password.
func (c Credentials) RoutePasswordPath() string { return filepath.Join(c.Dir, RoutePasswordFile) }

// RoutePassword reads the route password.
func (c Credentials) RoutePassword() (string, error) {
	b, err := os.ReadFile(c.RoutePasswordPath())
	if err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	p := strings.TrimSpace(string(b))
	if len(p) < 32 || strings.ContainsFunc(p, func(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') }) {
		return "", fmt.Errorf("credentials: %s: not a route password (at least 32 hex digits): delete it and run orderly credentials init again, then restart the nodes", c.RoutePasswordPath())
	}
	return p, nil
}

// newSeed writes a new random user seed to path (mode 0600).
func newSeed(path string) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	if err := filesync.WriteFile(path, seed, 0o600); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return nil
}

// SeedPath is the path of user's seed file.
func (c Credentials) SeedPath(user string) string { return filepath.Join(c.Dir, SeedFile(user)) }

// ConfigPath is the path of the configuration fragment.
func (c Credentials) ConfigPath() string { return filepath.Join(c.Dir, ConfigFile) }

// PublicKey reads user's seed and returns its public key.
func (c Credentials) PublicKey(user string) (string, error) { return publicKeyOf(c.SeedPath(user)) }

// publicKeyOf reads the seed at path and returns its public key.
func publicKeyOf(path string) (string, error) {
	seed, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return kp.PublicKey()
}

// Config renders the nats-server configuration fragment: the accounts, the
// users with their public keys and permissions, and the system account.
func (c Credentials) Config() (string, error) {
	var b strings.Builder
	b.WriteString("# Written by orderly (internal/natsauth): orderly's NATS accounts, users and permissions.\n")
	b.WriteString("# Public keys only; the seeds are the *.nk files beside it. Include it from a server's config.\n")
	js, err := c.jetStreamBlock()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "accounts {\n  %s {\n    jetstream: %s\n    users: [\n", Account, js)
	for _, u := range Users {
		if u == System || u == Events {
			continue
		}
		if err := c.user(&b, u); err != nil {
			return "", err
		}
	}
	services, err := c.Services()
	if err != nil {
		return "", err
	}
	b.WriteString("    ]\n    # For the consumer services: the events user's account, and one account per service with a key of its own.\n    exports: [\n")
	export := func(subject string, stream bool, accounts ...string) {
		fmt.Fprintf(&b, "      { service: %q", subject)
		if stream {
			b.WriteString(", response_type: stream")
		}
		fmt.Fprintf(&b, ", accounts: [%s] }\n", strings.Join(accounts, ", "))
	}
	for _, e := range eventsExports {
		accounts := []string{EventsAccount}
		if e.service == "" {
			for _, name := range services {
				accounts = append(accounts, ServiceAccount(name))
			}
		}
		export(e.subject, e.stream, accounts...)
	}
	for _, name := range services {
		for _, e := range eventsExports {
			if e.service != "" {
				export(serviceSubject(e.subject, e.service, name), e.stream, ServiceAccount(name))
			}
		}
	}
	fmt.Fprintf(&b, "    ]\n  }\n  %s {\n    users: [\n", EventsAccount)
	// The shared events user may not use the consumers of the services
	// with keys of their own (a reply it names stays in its account).
	var theirs []string
	for _, name := range services {
		for _, e := range eventsExports {
			if e.service != "" {
				theirs = append(theirs, serviceSubject(e.subject, e.service, name))
			}
		}
	}
	if err := c.user(&b, Events, theirs...); err != nil {
		return "", err
	}
	b.WriteString("    ]\n    imports: [\n")
	for _, e := range eventsExports {
		fmt.Fprintf(&b, "      { service: { account: %s, subject: %q } }\n", Account, e.subject)
	}
	b.WriteString("    ]\n  }\n")
	for _, name := range services {
		if err := c.serviceAccount(&b, name); err != nil {
			return "", err
		}
	}
	pub, err := c.PublicKey(System)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "  %s {\n    users: [\n      # %s\n      { nkey: %s }\n    ]\n  }\n}\nsystem_account: %s\n", SystemAccount, System, pub, SystemAccount)
	return b.String(), nil
}

// user writes u's entry of an account's users.
func (c Credentials) user(b *strings.Builder, u string, denyMore ...string) error {
	pub, err := c.PublicKey(u)
	if err != nil {
		return err
	}
	p, _ := Of(u)
	p.DenyPublish = append(p.DenyPublish, denyMore...)
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

// Check reports whether every user's seed and the route password are
// present, and they and every consumer service's seed readable by this
// process only (mode 0600 or stricter).
func (c Credentials) Check() error {
	var errs []error
	private := func(path string) {
		if err := readableByOthers(path); err != nil {
			errs = append(errs, err)
		}
	}
	for _, u := range Users {
		if _, err := os.Stat(c.SeedPath(u)); err != nil {
			errs = append(errs, fmt.Errorf("%w for %s: %v", ErrNoSeed, u, err))
			continue
		}
		private(c.SeedPath(u))
	}
	if _, err := c.RoutePassword(); err != nil {
		errs = append(errs, err)
	} else {
		private(c.RoutePasswordPath())
	}
	services, err := c.Services()
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range services {
		private(c.ServiceSeedPath(name))
	}
	return errors.Join(errs...)
}

// readableByOthers says so when the secret at path may be read by others
// than this process's user (mode 0600 or stricter is private); nil for a
// missing file, which the callers report themselves.
func readableByOthers(path string) error {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %v): chmod 600 it", path, st.Mode().Perm())
	}
	return nil
}

// ServicesDir is the directory of a credentials directory that holds the
// seeds of the consumer services with keys of their own, one per service
// (<name>.nk).
const ServicesDir = "services"

// ServiceAccount is the account of consumer service name.
func ServiceAccount(name string) string { return "ORDERLY_SERVICE_" + name }

// ServiceSeedPath is the path of consumer service name's seed.
func (c Credentials) ServiceSeedPath(name string) string {
	return filepath.Join(c.Dir, ServicesDir, name+".nk")
}

// Services lists the consumer services with keys of their own, sorted. A
// file there whose name is not a consumer's (jsstore.CheckEventsConsumerName)
// is an error: the configuration would not say what it is.
func (c Credentials) Services() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(c.Dir, ServicesDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // hidden: a write that did not finish (.tmp-*), or a file manager's
		}
		name, ok := strings.CutSuffix(e.Name(), ".nk")
		if !ok || e.IsDir() {
			return nil, fmt.Errorf("credentials: %s is not a service's seed (<name>.nk)", filepath.Join(c.Dir, ServicesDir, e.Name()))
		}
		if err := jsstore.CheckEventsConsumerName(name); err != nil {
			return nil, fmt.Errorf("credentials: %s: %w", filepath.Join(c.Dir, ServicesDir, e.Name()), err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// ErrServiceExists is returned by AddService for a service that has a key.
var ErrServiceExists = errors.New("the service has a key already")

// ErrNoService is returned by RemoveService for a service without a key.
var ErrNoService = errors.New("no such service")

// AddService creates consumer service name's seed (mode 0600) and writes the
// configuration again, with the service's account: it may read ORDER_EVENTS
// and pull from and ack the durable consumer of the same name, which the
// operator makes (orderly events consumer add), and nothing else. NATS
// servers load it on their next start or reload.
func (c Credentials) AddService(name string) error {
	if err := jsstore.CheckEventsConsumerName(name); err != nil {
		return err
	}
	path := c.ServiceSeedPath(name)
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s: %w (%s)", name, ErrServiceExists, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	if err := newSeed(path); err != nil {
		return err
	}
	return c.writeConfig()
}

// RemoveService deletes consumer service name's seed and writes the
// configuration again, without its account.
func (c Credentials) RemoveService(name string) error {
	if err := jsstore.CheckEventsConsumerName(name); err != nil {
		return err
	}
	if err := os.Remove(c.ServiceSeedPath(name)); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w (no %s)", name, ErrNoService, c.ServiceSeedPath(name))
	} else if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	// The removal survives a power loss: the configuration is made from
	// the seeds there are, so a seed back from the dead is a key back in it.
	if err := filesync.SyncDir(filepath.Dir(c.ServiceSeedPath(name))); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return c.writeConfig()
}

func (c Credentials) writeConfig() error {
	conf, err := c.Config()
	if err != nil {
		return err
	}
	return filesync.WriteFile(c.ConfigPath(), []byte(conf), 0o644)
}

// ServicePermissions are what consumer service name's user may publish and
// subscribe to in its account: the reads of ORDER_EVENTS and its own
// consumer's subjects, and replies on _INBOX or on the events user's prefix
// (the account has no other user whose replies it could read).
func ServicePermissions(name string) Permissions {
	p := Permissions{Subscribe: []string{"_INBOX.>", InboxPrefix(Events) + ".>"}}
	for _, e := range eventsExports {
		if e.granted {
			p.Publish = append(p.Publish, serviceSubject(e.subject, e.service, name))
		}
	}
	slices.Sort(p.Publish)
	return p
}

// serviceAccount writes consumer service name's account: its user and its
// imports.
func (c Credentials) serviceAccount(b *strings.Builder, name string) error {
	pub, err := publicKeyOf(c.ServiceSeedPath(name))
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	p := ServicePermissions(name)
	fmt.Fprintf(b, "  %s {\n    users: [\n      # service %s\n      { nkey: %s,\n        permissions: {\n", ServiceAccount(name), name, pub)
	fmt.Fprintf(b, "          publish: { allow: %s }\n          subscribe: { allow: %s }\n        }\n      }\n    ]\n    imports: [\n", list(p.Publish), list(p.Subscribe))
	for _, e := range eventsExports {
		fmt.Fprintf(b, "      { service: { account: %s, subject: %q } }\n", Account, serviceSubject(e.subject, e.service, name))
	}
	b.WriteString("    ]\n  }\n")
	return nil
}
