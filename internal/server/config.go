package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/hub"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/ops"
	"github.com/orderly-dev/orderly/internal/pipeline"
	"github.com/orderly-dev/orderly/internal/tracing"
	"github.com/orderly-dev/orderly/processor"
)

// Roles says which components run in this process.
type Roles struct {
	API, Processor, Projector bool
}

// DefaultRoles are the components orderly serve runs: the API and the
// processor. The projector is optional (ADR 0009): the processor stores each
// key's response as its claim.
var DefaultRoles = Roles{API: true, Processor: true}

// Config configures a process.
type Config struct {
	// Roles to run.
	Roles Roles
	// HTTPAddr is the listen address of the API, or of the operational
	// endpoints of a process without the API (host:port; port 0 picks one).
	HTTPAddr string
	// HTTPAnonymous lets the API serve /v1 without tokens (API.Tokens) on an
	// HTTPAddr that other hosts can reach. Without it such a configuration
	// is refused: anyone who reached the port could place orders. On a
	// loopback address no tokens are needed.
	HTTPAnonymous bool
	// DataDir holds the embedded server's JetStream files.
	DataDir string
	// NATSURL, when set, connects to that NATS instead of starting one.
	NATSURL string
	// Credentials authenticate the connection to NATSURL. (The embedded
	// server's are created in DataDir/credentials on first start.)
	Credentials jsstore.Credentials
	// InboxPrefix is where replies arrive: the prefix the credentials' user
	// may subscribe to. Empty: the one of the roles' user (natsauth).
	InboxPrefix string
	// NATSListen is the embedded server's client address; empty: in-process only.
	NATSListen string
	// NATSTLS is when the embedded server's client port requires TLS:
	// NATSTLSAuto (or empty) when NATSListen can be reached from other
	// hosts, NATSTLSOn, NATSTLSOff. Its CA and certificate are made in
	// DataDir/credentials (natsauth.InitTLS), and orderly's own connection
	// trusts that CA.
	NATSTLS string
	// NATSTLSHosts are more names and addresses that clients on other hosts
	// reach the embedded server at, for its certificate, besides the
	// listen host, this host's name and, for an unspecified listen host
	// (0.0.0.0, ::), this host's addresses.
	NATSTLSHosts []string
	// NATSName names the embedded server.
	NATSName string
	// NATSProcess is where the embedded server runs: natsserver.InProcess
	// (the default, docs/adr/0016) or natsserver.Child (a process of its
	// own, started from this binary, docs/adr/0014).
	NATSProcess string
	// NATSMemoryLimit is the soft memory limit of the embedded server's
	// child process (natsserver.Child): 0 gives it this process's limit,
	// math.MaxInt64 none.
	NATSMemoryLimit int64
	// Cluster makes the embedded server a cluster node.
	Cluster *natsserver.ClusterConfig
	// Fsync is the embedded server's durability mode.
	Fsync natsserver.Fsync
	// Topology is the streams, buckets and consumers. With the embedded
	// server, the process sets it up; against NATSURL it only waits for it
	// (Setup, run with the operator's credentials, sets it up).
	Topology jsstore.Topology
	// API configures the HTTP layer; App the use cases behind it; Hub its
	// view of decisions (ResultTTL is read from the bucket).
	API api.Config
	App app.Config
	Hub hub.Config
	// Processor and Projector configure the two consumer pipelines (stream,
	// consumer and dead-letter subject are set by DefaultConfig). A zero
	// Timeout is the smaller of 5s and half the topology's ack wait.
	Processor pipeline.Config
	Projector pipeline.Config
	// ProcessorHooks inject faults in tests; zero in production.
	ProcessorHooks processor.Hooks
	// OrderIDs is the form of the IDs of new orders (ADR 0010):
	// jsstore.OrderIDsNonce, jsstore.OrderIDsKeyed, or OrderIDsAuto, the form
	// stored with the topology (keyed for one this version created), looked
	// at again every OrderIDsRefresh (default 5s) so that `orderly setup
	// --order-ids` switches running APIs.
	OrderIDs        string
	OrderIDsRefresh time.Duration
	// DecidedBelowRefresh is how often a processor reads its consumer's
	// acknowledgement floor, which its events then carry
	// (events.HeaderDecidedBelow; default 1s: a consumer made again from
	// the newest event delivers again about that long of commands).
	DecidedBelowRefresh time.Duration
	// KeysAlwaysNew, in tests, makes the API's view of the keys call every key
	// new, as if it lagged behind every record, to show what the broker's
	// window and the processor's claim do when it lags; false in production.
	KeysAlwaysNew bool
	// Ops configures the operational endpoints.
	Ops ops.Config
	// StartupTimeout bounds how long Start waits for NATS and JetStream to
	// answer (a cluster that is still forming, a server that starts later).
	StartupTimeout time.Duration
	// MinFreeSpace is, with the embedded server, the free space of the data
	// directory's file system below which new orders are refused (503, not
	// ready); decisions go on down to half of it. 0 disables the guard.
	MinFreeSpace int64
	// StoreFaultGrace is how long the embedded store may stay stopped after a
	// critical write error before the process reports itself dead (/healthz
	// fails, Failed delivers an error) so that a supervisor restarts it: only
	// a restart makes nats-server write again.
	StoreFaultGrace time.Duration
	// ShutdownTimeout bounds Shutdown.
	ShutdownTimeout time.Duration
	// HTTP bounds what clients may hold of the HTTP server.
	HTTP HTTPLimits
	// Version and Commit label orderly_build_info, so that a rolling upgrade
	// can be followed in the metrics.
	Version, Commit string
	// Tracing exports spans when it has an endpoint; the trace context
	// travels and is logged either way (internal/tracing).
	Tracing tracing.Config
	// PprofAddr, when set, serves net/http/pprof there (never on the API's port).
	PprofAddr string
	// NATSPprofAddr, when set, serves the profiles of the embedded server's
	// child process there.
	NATSPprofAddr string
	// BatchWrites groups concurrent writes to a stream into atomic batches
	// (group commit): with fsync always, one sync per batch instead of per
	// message. Off by default: on a 2-core machine the batches that form are
	// small and the server's staging of each batch costs more than the syncs
	// it saves (docs/performance.md).
	BatchWrites bool
	// DecisionLag, when positive, lets the processor's decisions trail the
	// commands by up to this long while it is behind and no request of this
	// process waits for a decision, so that the API has the cores in a burst
	// (pipeline.Yield, ADR 0015). It needs the API and the processor in one
	// process: a processor alone cannot see who waits. 0: decide at once.
	DecisionLag time.Duration
}

// HTTPLimits bound what slow or greedy clients can take.
type HTTPLimits struct {
	// HeaderTimeout is how long a client may take to send a request's headers.
	HeaderTimeout time.Duration
	// BodyTimeout is how long a client may take to send a request's body once
	// its headers are in (the API answers 408; the connection is closed), so
	// that slow uploads cannot hold connections for ever. Long polls are not
	// limited: the deadline is lifted once the body is in.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no request.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the size of a request's headers (431 above).
	MaxHeaderBytes int
	// MaxConns caps the open HTTP connections; more wait in the listen queue
	// until one closes, so that clients can never take the file descriptors
	// the store needs. 0: half of the process's file limit (RLIMIT_NOFILE),
	// between 64 and 16384.
	MaxConns int
}

// maxConns is the connection cap: as set, or derived from the file limit.
func (l HTTPLimits) maxConns() int {
	if l.MaxConns > 0 {
		return l.MaxConns
	}
	return min(max(fileLimit()/2, 64), 16384)
}

// DefaultConfig is the configuration of orderly serve.
func DefaultConfig() Config {
	return Config{
		Roles:       DefaultRoles,
		HTTPAddr:    "127.0.0.1:8080",
		DataDir:     "./data",
		NATSListen:  "127.0.0.1:4222",
		NATSName:    "orderly",
		NATSTLS:     NATSTLSAuto,
		NATSProcess: natsserver.InProcess,
		Fsync:       natsserver.Fsync{Interval: time.Second},
		Topology:    jsstore.DefaultTopology(),
		API:         api.DefaultConfig(),
		App:         app.Config{RequestTimeout: 10 * time.Second},
		Hub:         hub.Config{CacheSize: 16384},
		Processor: pipeline.Config{
			Name: "processor", Stream: events.CommandStream, Consumer: jsstore.ProcessorConsumer,
			Concurrency: 1024, MaxAttempts: 10, DeadLetterSubject: events.DeadLetterSubject,
		},
		Projector: pipeline.Config{
			Name: "projector", Stream: events.EventStream, Consumer: jsstore.ProjectorConsumer,
			Concurrency: 128,
		},
		OrderIDs:        OrderIDsAuto,
		StartupTimeout:  2 * time.Minute,
		MinFreeSpace:    256 << 20,
		StoreFaultGrace: 30 * time.Second,
		ShutdownTimeout: 40 * time.Second,
		HTTP:            HTTPLimits{HeaderTimeout: 10 * time.Second, BodyTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 32 << 10},
		Tracing:         tracing.Config{SampleRatio: 1},
	}
}

// The values of Config.NATSTLS.
const (
	NATSTLSAuto = "auto"
	NATSTLSOn   = "on"
	NATSTLSOff  = "off"
)

// embeddedTLS reports whether the embedded server's client port requires
// TLS.
func (c Config) embeddedTLS() bool {
	switch c.NATSTLS {
	case NATSTLSOn:
		return true
	case NATSTLSOff:
		return false
	}
	return c.NATSListen != "" && !LoopbackOnly(c.NATSListen)
}

// OrderIDsAuto makes an API follow the form of order IDs stored with the
// topology (see Config.OrderIDs).
const OrderIDsAuto = "auto"

// LoopbackOnly reports whether a listen address (host:port) accepts
// connections from this host only: its host is a loopback IP or localhost.
// An empty host, an unspecified address (0.0.0.0, ::) and every other name
// or address can be reached from other hosts.
func LoopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// anonymousBeyondLoopback reports whether c serves /v1 without tokens on an
// address other hosts can reach: refused without HTTPAnonymous, warned of
// with it.
func (c Config) anonymousBeyondLoopback() bool {
	return c.Roles.API && len(c.API.Tokens) == 0 && !LoopbackOnly(c.HTTPAddr)
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.Roles.API && c.OrderIDs != OrderIDsAuto && c.OrderIDs != jsstore.OrderIDsNonce && c.OrderIDs != jsstore.OrderIDsKeyed {
		errs = append(errs, fmt.Errorf("--order-ids must be %s, %s or %s, got %q", OrderIDsAuto, jsstore.OrderIDsNonce, jsstore.OrderIDsKeyed, c.OrderIDs))
	}
	if !c.Roles.API && !c.Roles.Processor && !c.Roles.Projector {
		errs = append(errs, errors.New("--roles: no role to run"))
	}
	if c.NATSURL == "" && c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is empty: the embedded server needs a directory for its data"))
	}
	if c.NATSURL == "" && c.NATSProcess != natsserver.Child && c.NATSProcess != natsserver.InProcess {
		errs = append(errs, fmt.Errorf("--nats-process must be %s or %s, got %q", natsserver.Child, natsserver.InProcess, c.NATSProcess))
	}
	for _, a := range []struct{ name, addr string }{{"--pprof-addr", c.PprofAddr}, {"--nats-pprof-addr", c.NATSPprofAddr}} {
		// Profiles have no authentication, and /debug/pprof/cmdline shows
		// the command line with any secret given as a flag.
		if a.addr == "" {
			continue
		}
		if err := checkListenAddr(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.name, a.addr, err))
		} else if !LoopbackOnly(a.addr) {
			errs = append(errs, fmt.Errorf("%s %s can be reached from other hosts, and Go profiles have no authentication: listen on loopback, such as 127.0.0.1:6060, and reach it through an SSH tunnel or kubectl port-forward", a.name, a.addr))
		}
	}
	if c.NATSURL == "" && (c.Credentials.CAFile != "" || c.Credentials.CertFile != "" || c.Credentials.KeyFile != "") {
		errs = append(errs, errors.New("NATS TLS files (--nats-ca, --nats-cert, --nats-key): only with --nats-url; the embedded server's TLS is --nats-tls, and orderly trusts its CA itself"))
	}
	if c.NATSURL == "" && c.Credentials.JSDomain != "" {
		errs = append(errs, errors.New("JetStream domain (--nats-js-domain): only with --nats-url; the embedded server's streams are in its own JetStream"))
	} else if err := jsstore.ValidDomain(c.Credentials.JSDomain); err != nil {
		errs = append(errs, err)
	}
	switch c.NATSTLS {
	case "", NATSTLSAuto, NATSTLSOn, NATSTLSOff:
	default:
		errs = append(errs, fmt.Errorf("--nats-tls must be %s, %s or %s, got %q", NATSTLSAuto, NATSTLSOn, NATSTLSOff, c.NATSTLS))
	}
	if c.NATSURL != "" && (c.NATSTLS == NATSTLSOn || len(c.NATSTLSHosts) > 0) {
		errs = append(errs, errors.New("NATS TLS of the embedded server (--nats-tls on, --nats-tls-host): not with --nats-url, whose servers have TLS of their own (trust their CA with --nats-ca)"))
	}
	for _, h := range c.NATSTLSHosts {
		if !natsauth.ValidTLSHost(h) {
			errs = append(errs, fmt.Errorf("--nats-tls-host %q: give a DNS name or an IP address", h))
		}
	}
	if c.NATSPprofAddr != "" && (c.NATSURL != "" || c.NATSProcess != natsserver.Child) {
		errs = append(errs, errors.New("--nats-pprof-addr: only for an embedded server in its own process (--nats-process child); in process, --pprof-addr profiles both"))
	}
	if c.NATSURL == "" && c.Cluster == nil && c.Topology.Replicas > 1 {
		errs = append(errs, fmt.Errorf("--replicas %d: the embedded NATS server is a single node, which keeps one copy of each stream; replicas are for a NATS cluster (--nats-url, with orderly setup)", c.Topology.Replicas))
	}
	if c.Fsync.Group && (c.NATSURL != "" || c.Cluster != nil) {
		// The group commit syncs the embedded server's files, and a stream of
		// several replicas is written by the server in the background.
		errs = append(errs, errors.New("--fsync group needs the embedded server, alone (not --nats-url or a cluster)"))
	}
	if err := checkListenAddr(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("--http-addr %q: %w", c.HTTPAddr, err))
	} else if c.anonymousBeyondLoopback() && !c.HTTPAnonymous {
		errs = append(errs, fmt.Errorf("--http-addr %s can be reached from other hosts, and without tokens anyone who reaches it can place orders: "+
			"give the clients tokens (--tokens-file), listen on loopback (127.0.0.1), "+
			"or, when something in front of orderly authenticates the clients, allow them in anonymously (--http-anonymous)", c.HTTPAddr))
	}
	if c.DecisionLag < 0 {
		errs = append(errs, fmt.Errorf("--decision-lag must not be negative, got %s", c.DecisionLag))
	}
	if c.DecisionLag > 0 && !(c.Roles.API && c.Roles.Processor) {
		errs = append(errs, errors.New("--decision-lag needs the api and processor roles in one process (--roles api,processor): a processor alone cannot see the requests that wait for its decisions"))
	}
	if c.Roles.API {
		errs = append(errs, c.API.Validate(), c.App.Validate())
		if c.Hub.CacheSize < 0 {
			errs = append(errs, fmt.Errorf("--result-cache must not be negative, got %d", c.Hub.CacheSize))
		}
	}
	for _, p := range []struct {
		on  bool
		cfg pipeline.Config
	}{{c.Roles.Processor, c.Processor}, {c.Roles.Projector, c.Projector}} {
		if !p.on {
			continue
		}
		if p.cfg.Concurrency < 1 { // the pipeline's own default is for a zero nobody set; a flag's zero is a mistake
			errs = append(errs, fmt.Errorf("--%s-concurrency must be at least 1, got %d", p.cfg.Name, p.cfg.Concurrency))
			continue
		}
		errs = append(errs, p.cfg.Validate())
		if t := c.pipelineTimeout(p.cfg); t >= c.Topology.AckWait {
			errs = append(errs, fmt.Errorf("%s timeout %s must be shorter than the ack wait %s", p.cfg.Name, t, c.Topology.AckWait))
		}
	}
	errs = append(errs, c.Topology.Validate())
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--http-header-timeout", c.HTTP.HeaderTimeout}, {"--http-body-timeout", c.HTTP.BodyTimeout}, {"--http-idle-timeout", c.HTTP.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.name, d.v))
		}
	}
	if c.HTTP.MaxHeaderBytes < 4096 {
		errs = append(errs, fmt.Errorf("--http-max-header-bytes must be at least 4096 bytes, got %d", c.HTTP.MaxHeaderBytes))
	}
	if c.HTTP.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("--http-max-conns must not be negative, got %d", c.HTTP.MaxConns))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--startup-timeout", c.StartupTimeout}, {"--store-fault-grace", c.StoreFaultGrace}, {"the shutdown timeout", c.ShutdownTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.name, d.v))
		}
	}
	if c.MinFreeSpace < 0 {
		errs = append(errs, fmt.Errorf("--min-free-space must not be negative, got %d", c.MinFreeSpace))
	}
	errs = append(errs, c.Tracing.Validate())
	return errors.Join(errs...)
}

// pipelineTimeout is p's attempt timeout: as set, or the smaller of 5s and
// half the ack wait.
func (c Config) pipelineTimeout(p pipeline.Config) time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return min(5*time.Second, c.Topology.AckWait/2)
}

// checkListenAddr refuses an address no listen can take, with the
// configuration, rather than by the listen after the embedded server and
// its data directory were made (whose error says to look for a busy port).
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return errors.New("the port must be a number from 0 to 65535 or a service name")
	}
	return nil
}
