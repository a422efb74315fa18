// Package server wires orderly's components into one process and owns their
// lifecycle: the embedded nats-server (unless a URL is given), the topology,
// the HTTP API with its hub, the processor and the projector on their
// pipelines, and the operational endpoints. Start brings them up in order;
// Shutdown takes them down in reverse: HTTP first (stop accepting, finish
// in-flight requests), then the pipelines, then the NATS connection
// (drained), then the embedded server.
//
// It holds no logic of its own: every component is built with its own
// New(config, dependencies, registerer, logger).
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/netutil"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/datadir"
	"github.com/orderly-dev/orderly/internal/durable"
	"github.com/orderly-dev/orderly/internal/hub"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/ops"
	"github.com/orderly-dev/orderly/internal/pipeline"
	"github.com/orderly-dev/orderly/internal/tracing"
	"github.com/orderly-dev/orderly/processor"
	"github.com/orderly-dev/orderly/projections"
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
	// NATSName names the embedded server.
	NATSName string
	// NATSProcess is where the embedded server runs: natsserver.InProcess
	// (the default, docs/adr/0016) or natsserver.Child (a process of its
	// own, started from this binary, docs/adr/0014).
	NATSProcess string
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
	}
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
		errs = append(errs, fmt.Errorf("order IDs must be %s, %s or %s, got %q", OrderIDsAuto, jsstore.OrderIDsNonce, jsstore.OrderIDsKeyed, c.OrderIDs))
	}
	if !c.Roles.API && !c.Roles.Processor && !c.Roles.Projector {
		errs = append(errs, errors.New("no role to run"))
	}
	if c.NATSURL == "" && c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if c.NATSURL == "" && c.NATSProcess != natsserver.Child && c.NATSProcess != natsserver.InProcess {
		errs = append(errs, fmt.Errorf("NATS process must be %s or %s, got %q", natsserver.Child, natsserver.InProcess, c.NATSProcess))
	}
	for _, a := range []struct{ name, addr string }{{"pprof address", c.PprofAddr}, {"NATS pprof address", c.NATSPprofAddr}} {
		// Profiles have no authentication, and /debug/pprof/cmdline shows
		// the command line with any secret given as a flag.
		if a.addr != "" && !LoopbackOnly(a.addr) {
			errs = append(errs, fmt.Errorf("%s %s can be reached from other hosts, and Go profiles have no authentication: listen on loopback, such as 127.0.0.1:6060, and reach it through an SSH tunnel or kubectl port-forward", a.name, a.addr))
		}
	}
	if c.NATSPprofAddr != "" && (c.NATSURL != "" || c.NATSProcess != natsserver.Child) {
		errs = append(errs, errors.New("NATS pprof address: only for an embedded server in its own process (in process, the pprof address profiles both)"))
	}
	if c.Fsync.Group && (c.NATSURL != "" || c.Cluster != nil) {
		// The group commit syncs the embedded server's files, and a stream of
		// several replicas is written by the server in the background.
		errs = append(errs, errors.New("fsync group needs the embedded server, alone (not --nats-url or a cluster)"))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("http addr %q: %w", c.HTTPAddr, err))
	} else if c.anonymousBeyondLoopback() && !c.HTTPAnonymous {
		errs = append(errs, fmt.Errorf("HTTP address %s can be reached from other hosts, and without tokens anyone who reaches it can place orders: "+
			"give the clients tokens (--tokens-file), listen on loopback (127.0.0.1), "+
			"or, when something in front of orderly authenticates the clients, allow them in anonymously (--http-anonymous)", c.HTTPAddr))
	}
	if c.DecisionLag < 0 {
		errs = append(errs, fmt.Errorf("decision lag must not be negative, got %s", c.DecisionLag))
	}
	if c.DecisionLag > 0 && !(c.Roles.API && c.Roles.Processor) {
		errs = append(errs, errors.New("decision lag needs the api and processor roles in one process: a processor alone cannot see the requests that wait for its decisions"))
	}
	if c.Roles.API {
		errs = append(errs, c.API.Validate(), c.App.Validate())
		if c.Hub.CacheSize < 0 {
			errs = append(errs, fmt.Errorf("result cache must not be negative, got %d", c.Hub.CacheSize))
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
			errs = append(errs, fmt.Errorf("%s concurrency must be at least 1, got %d", p.cfg.Name, p.cfg.Concurrency))
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
	}{{"header", c.HTTP.HeaderTimeout}, {"body", c.HTTP.BodyTimeout}, {"idle", c.HTTP.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("HTTP %s timeout must be positive, got %s", d.name, d.v))
		}
	}
	if c.HTTP.MaxHeaderBytes < 4096 {
		errs = append(errs, fmt.Errorf("HTTP header limit must be at least 4096 bytes, got %d", c.HTTP.MaxHeaderBytes))
	}
	if c.HTTP.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("HTTP connection cap must not be negative, got %d", c.HTTP.MaxConns))
	}
	if c.ShutdownTimeout <= 0 || c.StartupTimeout <= 0 || c.StoreFaultGrace <= 0 {
		errs = append(errs, errors.New("startup and shutdown timeouts and the store fault grace must be positive"))
	}
	if c.MinFreeSpace < 0 {
		errs = append(errs, fmt.Errorf("min free space must not be negative, got %d", c.MinFreeSpace))
	}
	return errors.Join(errs...)
}

// intake is what the processor's yield looks at (Config.DecisionLag): who
// waits for decisions, and how many commands the API has stored.
type intake struct {
	hub *hub.Hub
	svc *app.Service
}

// pipelineTimeout is p's attempt timeout: as set, or the smaller of 5s and
// half the ack wait.
func (c Config) pipelineTimeout(p pipeline.Config) time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return min(5*time.Second, c.Topology.AckWait/2)
}

// Server is a running orderly process.
type Server struct {
	cfg       Config
	logger    *slog.Logger
	ns        natsserver.Instance
	nc        *nats.Conn
	hub       *hub.Hub
	intake    atomic.Pointer[intake] // the API, for the processor's yield (set after the processor starts)
	yield     *pipeline.Yield        // the processor's, with --decision-lag: the API's Retry-After reads it
	durable   *durable.Syncer        // with --fsync group: the answers' group commit
	svc       *app.Service
	http      *http.Server
	httpLn    net.Listener
	pprof     *http.Server
	pipelines []*pipeline.Pipeline
	batchers  []*jsstore.Batcher
	registry  *prometheus.Registry
	guard     *jsstore.DiskGuard
	writes    jsstore.WriteHealth
	fault     storeFault
	creds     natsauth.Credentials
	stopping  atomic.Bool

	wg       sync.WaitGroup
	failed   chan error
	lock     *datadir.Lock // of the data directory, with the embedded server
	tracing  *tracing.Provider
	tracer   trace.Tracer
	shutOnce sync.Once
	shutErr  error
}

// Start brings a process up. On error everything started so far is stopped.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	logger = slog.New(tracing.LogHandler(logger.Handler()))
	s := &Server{cfg: cfg, logger: logger, failed: make(chan error, 4), registry: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			_ = s.Shutdown(sctx)
		}
	}()
	tcfg := cfg.Tracing
	if tcfg.Service == "" {
		tcfg.Service = "orderly-" + s.user()
	}
	if tcfg.Version == "" {
		tcfg.Version = cfg.Version
	}
	if s.tracing, err = tracing.Start(ctx, tcfg); err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	s.tracer = s.tracing.Tracer("github.com/orderly-dev/orderly")
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if mem := ops.MemoryCollector(); mem != nil {
		s.registry.MustRegister(mem)
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orderly_build_info", Help: "Always 1; its labels name the running build."},
		[]string{"version", "commit", "goversion"})
	build.WithLabelValues(cfg.Version, cfg.Commit, runtime.Version()).Set(1)
	s.registry.MustRegister(build)
	if cfg.PprofAddr != "" {
		if err := s.startPprof(cfg.PprofAddr); err != nil {
			return nil, err
		}
	}
	js, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	if s.ns != nil && cfg.MinFreeSpace > 0 {
		abs, _ := filepath.Abs(cfg.DataDir)
		if s.guard, err = jsstore.NewDiskGuard(jsstore.DiskGuardConfig{Dir: abs, Reserve: cfg.MinFreeSpace}); err != nil {
			return nil, err
		}
	}
	needs := jsstore.Needs{API: cfg.Roles.API, Processor: cfg.Roles.Processor, Projector: cfg.Roles.Projector}
	if err := waitTopology(ctx, js, needs, cfg.StartupTimeout, s.logger); err != nil {
		return nil, err
	}
	// Every component of the process shares the one connection: measured
	// faster than a connection each (fewer, fuller socket writes; see
	// docs/performance.md), and a connection's subscriptions have their own
	// pending limits, so a slow one does not hold up the others.
	if cfg.Roles.Processor {
		if err := s.startProcessor(ctx, js); err != nil {
			return nil, err
		}
	}
	if cfg.Roles.Projector {
		if err := s.startProjector(ctx, js); err != nil {
			return nil, err
		}
	}
	ready := []ops.Check{
		{Name: "nats", Run: func(context.Context) error {
			if !s.nc.IsConnected() {
				return fmt.Errorf("connection is %s", s.nc.Status())
			}
			return nil
		}},
		{Name: "jetstream", Run: func(ctx context.Context) error { _, err := js.AccountInfo(ctx); return err }},
		{Name: "store", Run: func(ctx context.Context) error {
			if err := s.fault.err(); err != nil {
				return err
			}
			return s.writes.Check(ctx)
		}},
	}
	if s.guard != nil {
		ready = append(ready, ops.Check{Name: "storage", Run: s.guard.Check})
	}
	live := []ops.Check{{Name: "store", Run: func(context.Context) error { return s.fault.dead(cfg.StoreFaultGrace) }}}
	if s.ns != nil {
		s.wg.Add(2)
		go s.watchStore()
		go s.watchServer()
	}
	if s.guard != nil {
		s.registry.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orderly_storage_free_bytes",
				Help: "Free space of the embedded store's file system, as the disk guard sees it."}, func() float64 { return float64(s.guard.Free()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orderly_storage_reserve_bytes",
				Help: "--min-free-space: below it new orders are refused."}, func() float64 { return float64(cfg.MinFreeSpace) }))
	}
	if !cfg.Roles.API {
		s.registry.MustRegister(ops.CheckCollector(ready, live, 2*time.Second))
		opsHandler, err := ops.NewHandler(cfg.Ops, ready, live, s.registry)
		if err != nil {
			return nil, err
		}
		return s, s.serveHTTP(opsHandler)
	}
	return s, s.startAPI(ctx, js, ready, live)
}

// connect starts the embedded server (unless a URL is given) and connects.
// With the embedded server, it creates the credentials on first start and
// sets the topology up over a short-lived operator connection; the process
// then works as the serve user. Against a URL it connects with the given
// credentials, as the user of its roles.
func (s *Server) connect(ctx context.Context) (jetstream.JetStream, error) {
	ccfg := jsstore.ConnectConfig{URL: s.cfg.NATSURL, Name: "main", Credentials: s.cfg.Credentials,
		InboxPrefix: s.cfg.InboxPrefix, OnClosed: s.closed}
	if ccfg.InboxPrefix == "" {
		ccfg.InboxPrefix = natsauth.InboxPrefix(s.user())
	}
	if s.cfg.NATSURL == "" {
		abs, _ := filepath.Abs(s.cfg.DataDir)
		lock, err := datadir.Acquire(abs)
		if err != nil {
			return nil, err
		}
		s.lock = lock
		s.creds = natsauth.Credentials{Dir: filepath.Join(abs, "credentials")}
		if err := s.creds.Init(); err != nil {
			return nil, err
		}
		if err := s.creds.Check(); err != nil {
			return nil, err
		}
		operator, err := nats.NkeyOptionFromSeed(s.creds.SeedPath(natsauth.Operator))
		if err != nil {
			return nil, err
		}
		ncfg := natsserver.Config{
			ServerName: s.cfg.NATSName, StoreDir: abs, Listen: s.cfg.NATSListen,
			Fsync: s.cfg.Fsync, Cluster: s.cfg.Cluster, Logger: s.logger, OnError: s.fault.observe,
			Accounts: s.creds.ConfigPath(), Probe: []nats.Option{operator}, PprofAddr: s.cfg.NATSPprofAddr,
		}
		if s.cfg.MinFreeSpace > 0 {
			// The disk guard follows the real free space; nats-server's own
			// default limit is fixed at start and outlives a disk that grows.
			ncfg.MaxStore = unboundedStore
		}
		if s.cfg.Fsync.Group {
			// Commands before the responses and events they lead to: a round
			// that stops half way never keeps an effect without its cause.
			files := durable.NewStreamFiles(abs, natsauth.Account, events.CommandStream, jsstore.ResultsStream, events.EventStream)
			s.durable = durable.New(files.Sync)
			s.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "orderly_group_syncs_total",
				Help: "Sync rounds of --fsync group: each makes durable what the answers waiting for it say.",
			}, func() float64 { return float64(s.durable.Rounds()) }))
		}
		if s.cfg.NATSProcess == natsserver.Child {
			child, err := natsserver.StartChild(ctx, ncfg, s.creds.SeedPath(natsauth.Operator))
			if err != nil {
				return nil, err
			}
			s.ns = child
			// Its CPU, memory and file descriptors, as process_* has orderly's.
			s.registry.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{
				Namespace: "orderly_nats_server",
				PidFn:     func() (int, error) { return child.PID(), nil },
			}))
		} else {
			if ncfg.Listen == "" {
				// orderly's components reach it over loopback TCP, as they
				// reach a child: nats-server's in-process connection is a
				// synchronous net.Pipe, slower under load (ADR 0016).
				// The users' keys guard the port.
				ncfg.Listen = "127.0.0.1:-1"
			}
			ns, err := natsserver.Start(ctx, ncfg)
			if err != nil {
				return nil, err
			}
			s.ns = natsserver.Local(ns)
		}
		s.logger.Info("embedded NATS started", "process", s.cfg.NATSProcess, "pid", s.NATSPID(), "store", abs,
			"client_url", s.NATSURL(), "fsync", s.cfg.Fsync.String(), "credentials", s.creds.Dir)
		// The components reach the embedded server over loopback TCP: it
		// always listens, on a port of its own without --nats-listen.
		ccfg.URL = s.ns.ClientURL()
		setup := jsstore.ConnectConfig{URL: ccfg.URL, Name: "setup",
			Credentials: jsstore.Credentials{NkeyFile: s.creds.SeedPath(natsauth.Operator)}}
		topo := s.cfg.Topology
		topo.Projector = topo.Projector || s.cfg.Roles.Projector
		if err := Setup(ctx, SetupConfig{Connect: setup, Topology: topo, StartupTimeout: s.cfg.StartupTimeout}, s.logger); err != nil {
			return nil, err
		}
		ccfg.Credentials = jsstore.Credentials{NkeyFile: s.creds.SeedPath(natsauth.Serve)}
		ccfg.InboxPrefix = natsauth.InboxPrefix(natsauth.Serve)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.StartupTimeout)
	defer cancel()
	nc, err := jsstore.Connect(cctx, ccfg, s.logger)
	if err != nil {
		return nil, err
	}
	s.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return jsstore.FastPublish(js, 5*time.Second), nil
}

// user is the NATS user of the process's roles: the role's own, or serve
// for several.
func (s *Server) user() string {
	switch r := s.cfg.Roles; {
	case r.API && !r.Processor && !r.Projector:
		return natsauth.API
	case r.Processor && !r.API && !r.Projector:
		return natsauth.Processor
	case r.Projector && !r.API && !r.Processor:
		return natsauth.Projector
	}
	return natsauth.Serve
}

// closed is called when the connection is closed for good. Outside a
// shutdown the process cannot work any more: it stops, for its supervisor to
// start it again (a live process that answers 503 for ever helps nobody).
func (s *Server) closed(err error) {
	if s.stopping.Load() {
		return
	}
	s.logger.Error("the NATS connection was closed and will not reconnect: stopping", "err", err)
	select {
	case s.failed <- fmt.Errorf("NATS connection closed for good: %w", err):
	default:
	}
}

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
	cctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
	defer cancel()
	nc, err := jsstore.Connect(cctx, cfg.Connect, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
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

// publisher returns what a component writes through: js, or a batcher on js
// (stopped at shutdown) when writes are batched; refused below the free-space
// reserve of its level when the guard is on; followed for readiness.
func (s *Server) publisher(js jetstream.JetStream, level jsstore.Level) jsstore.Publisher {
	var p jsstore.Publisher = js
	if s.cfg.BatchWrites {
		b := jsstore.NewBatcher(js, 4, s.cfg.Topology.AckWait)
		s.batchers = append(s.batchers, b)
		p = b
	}
	if s.guard != nil {
		p = s.guard.Publisher(p, level)
	}
	return s.writes.Publisher(p)
}

// The stores are the processor's batch ports (their request and outcome types
// are declared alike on both sides) and give its hints; were they to drift
// apart, the processor would fall back to one write per command, or read
// what it need not, without a word, so the build checks it.
var (
	_ processor.BatchClaims   = (*jsstore.Results)(nil)
	_ processor.BatchEvents   = (*jsstore.Events)(nil)
	_ processor.RecordsHint   = (*jsstore.Results)(nil)
	_ processor.KeyClaimsHint = (*jsstore.Events)(nil)
)

func (s *Server) startProcessor(ctx context.Context, js jetstream.JetStream) error {
	claims, err := jsstore.OpenResults(ctx, js, s.publisher(js, jsstore.Decisions))
	if err != nil {
		return err
	}
	evs, err := jsstore.OpenEvents(ctx, js, s.publisher(js, jsstore.Decisions))
	if err != nil {
		return err
	}
	h, err := processor.New(processor.Config{Hooks: s.cfg.ProcessorHooks, ResultTTL: claims.TTL()}, processor.Deps{Claims: claims, Events: evs}, s.registry, s.logger)
	if err != nil {
		return err
	}
	delivery := func(d *pipeline.Delivery) processor.Delivery {
		pd := processor.Delivery{Data: d.Data, Seq: d.Seq, Delivered: d.Delivered}
		// Only the operator may publish on the replay subject (natsauth), so
		// only there is the header trusted.
		if d.Subject == events.ReplaySubject {
			if seq, err := strconv.ParseUint(d.Header.Get(events.HeaderReplayOf), 10, 64); err == nil && seq > 0 && seq < d.Seq {
				pd.OrderSeq = seq
			}
		}
		return pd
	}
	pcfg := s.cfg.Processor
	if s.cfg.DecisionLag > 0 {
		// The API starts after the processor: until then nobody waits and
		// nothing comes in.
		pcfg.Yield = &pipeline.Yield{Lag: s.cfg.DecisionLag,
			Waiting: func() int {
				if in := s.intake.Load(); in != nil {
					return in.hub.Waiters()
				}
				return 0
			},
			Intake: func() uint64 {
				if in := s.intake.Load(); in != nil {
					return in.svc.Stored()
				}
				return 0
			},
		}
		s.yield = pcfg.Yield
	}
	return s.run(ctx, js, pcfg, pipeline.Handler{
		// The commands that arrived together (or one), their claims and
		// events each written with one wait (ADR 0011); a span per command.
		HandleBatch: func(ctx context.Context, ds []*pipeline.Delivery) []error {
			pds := make([]processor.Delivery, len(ds))
			spans := make([]trace.Span, len(ds))
			for i, d := range ds {
				pds[i] = delivery(d)
				pds[i].Ctx, spans[i] = s.tracer.Start(d.Trace(ctx), "process CreateOrder", trace.WithSpanKind(trace.SpanKindConsumer),
					trace.WithAttributes(attribute.Int64("messaging.message.delivery_count", int64(d.Delivered))))
			}
			errs := h.HandleBatch(ctx, pds)
			for i, span := range spans {
				_ = spanErr(span, errs[i])
				span.End()
			}
			return errs
		},
		GiveUp: func(ctx context.Context, d *pipeline.Delivery, cause error) error {
			ctx, span := s.tracer.Start(ctx, "give up CreateOrder", trace.WithSpanKind(trace.SpanKindConsumer))
			defer span.End()
			span.RecordError(cause)
			return spanErr(span, h.GiveUp(ctx, delivery(d), cause))
		},
	})
}

func (s *Server) startProjector(ctx context.Context, js jetstream.JetStream) error {
	results, err := jsstore.OpenResults(ctx, js, s.publisher(js, jsstore.Decisions))
	if err != nil {
		return err
	}
	p, err := projections.NewProjector(projections.ProjectorConfig{ResultTTL: results.TTL()}, results, s.registry, s.logger)
	if err != nil {
		return err
	}
	return s.run(ctx, js, s.cfg.Projector, pipeline.Handler{
		Handle: func(ctx context.Context, d *pipeline.Delivery) error {
			ctx, span := s.tracer.Start(ctx, "project "+d.Subject, trace.WithSpanKind(trace.SpanKindConsumer))
			defer span.End()
			return spanErr(span, p.Handle(ctx, d.Data))
		},
	})
}

func (s *Server) startAPI(ctx context.Context, js jetstream.JetStream, ready, live []ops.Check) error {
	results, err := jsstore.OpenResults(ctx, js, js)
	if err != nil {
		return err
	}
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		return err
	}
	commands, err := jsstore.OpenCommands(ctx, js, s.publisher(js, jsstore.NewOrders))
	if err != nil {
		return err
	}
	hcfg := s.cfg.Hub
	hcfg.ResultTTL = results.TTL()
	hcfg.Keys = evs
	h, err := hub.New(hcfg, results, evs, s.registry, s.logger)
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	s.hub = h
	acfg := s.cfg.App
	acfg.Up = jsstore.WatchHealth(s.nc).Up
	acfg.KeyedOrderIDs = s.cfg.OrderIDs == jsstore.OrderIDsKeyed
	if s.cfg.OrderIDs == OrderIDsAuto {
		form, err := jsstore.StoredOrderIDs(ctx, js)
		if err != nil {
			return err
		}
		acfg.KeyedOrderIDs = form == jsstore.OrderIDsKeyed
	}
	var cache app.Cache = h
	if s.cfg.KeysAlwaysNew {
		cache = keysAlwaysNew{h}
	}
	deps := app.Deps{
		Results: keyAnswers{bucket: results, events: evs, ttl: results.TTL(), now: time.Now}, Cache: cache, Watcher: h, Commands: commands, Orders: projections.NewOrders(evs),
	}
	if s.durable != nil {
		deps.Durable = s.durable
	}
	svc, err := app.NewService(acfg, deps, s.logger)
	if err != nil {
		return err
	}
	s.svc = svc
	s.intake.Store(&intake{hub: h, svc: svc})
	s.logger.Info("order IDs", "form", map[bool]string{true: jsstore.OrderIDsKeyed, false: jsstore.OrderIDsNonce}[svc.KeyedOrderIDs()], "setting", s.cfg.OrderIDs)
	if s.cfg.OrderIDs == OrderIDsAuto {
		s.wg.Add(1)
		go s.followOrderIDs(js)
	}
	ready = append(ready, ops.Check{Name: "results_feed", Run: func(context.Context) error { return h.Live() }})
	s.registry.MustRegister(ops.CheckCollector(ready, live, 2*time.Second))
	opsHandler, err := ops.NewHandler(s.cfg.Ops, ready, live, s.registry)
	if err != nil {
		return err
	}
	apiCfg := s.cfg.API
	apiCfg.Tracer = s.tracer
	if y := s.yield; y != nil {
		// While the processor pauses, what is stored now may wait up to the
		// lag for its decision: pending answers say so (Retry-After).
		apiCfg.DecisionDelay = func() time.Duration {
			if y.Paused() {
				return y.Lag
			}
			return 0
		}
	}
	handler, err := api.NewHandler(apiCfg, svc, opsHandler, s.registry, s.logger)
	if err != nil {
		return err
	}
	return s.serveHTTP(handler)
}

// followOrderIDs looks at the form of order IDs stored with the topology
// every OrderIDsRefresh, and switches the API to it, until shutdown.
func (s *Server) followOrderIDs(js jetstream.JetStream) {
	s.every(cmp.Or(s.cfg.OrderIDsRefresh, 5*time.Second), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		form, err := jsstore.StoredOrderIDs(ctx, js)
		cancel()
		if err != nil {
			return true // NATS away: the form stays as it was
		}
		if keyed := form == jsstore.OrderIDsKeyed; keyed != s.svc.KeyedOrderIDs() {
			s.svc.SetKeyedOrderIDs(keyed)
			s.logger.Info("order IDs: the form stored with the topology changed; new orders take it", "form", form)
		}
		return true
	})
}

// every runs f every interval until f returns false or the server stops,
// and then marks the goroutine done (s.wg).
func (s *Server) every(interval time.Duration, f func() bool) {
	defer s.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	done := s.fault.stopped()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}

// keysAlwaysNew is a hub whose view of the keys lags behind every record.
type keysAlwaysNew struct{ *hub.Hub }

func (keysAlwaysNew) KnownNew(string) bool { return true }

// serveHTTP serves h on the configured HTTP address until Shutdown.
func (s *Server) serveHTTP(h http.Handler) error {
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP: cannot listen on %s (another orderly or server? set --http-addr): %w", s.cfg.HTTPAddr, err)
	}
	limit := s.cfg.HTTP.maxConns()
	ln = netutil.LimitListener(ln, limit)
	s.httpLn = ln
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "orderly_http_open_connections", Help: "Open HTTP connections."})
	s.registry.MustRegister(open, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orderly_http_connection_limit",
		Help: "Most HTTP connections open at once; more wait in the listen queue."}, func() float64 { return float64(limit) }))
	// ReadTimeout bounds a request whose body no handler of ours reads
	// (net/http answers OPTIONS * itself, reading its body); bodyDeadline
	// sets the real deadlines, and lifts them once the body is in, so that
	// long polls are not cut short. No WriteTimeout: it would cut them short.
	s.http = &http.Server{
		Handler:           bodyDeadline(h, s.cfg.HTTP.BodyTimeout),
		ReadHeaderTimeout: s.cfg.HTTP.HeaderTimeout,
		ReadTimeout:       s.cfg.HTTP.HeaderTimeout + s.cfg.HTTP.BodyTimeout,
		IdleTimeout:       s.cfg.HTTP.IdleTimeout,
		MaxHeaderBytes:    s.cfg.HTTP.MaxHeaderBytes,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				open.Inc()
			case http.StateClosed, http.StateHijacked:
				open.Dec()
			}
		},
	}
	// Said before the first request can be answered.
	if s.cfg.anonymousBeyondLoopback() {
		s.logger.Warn("the API takes orders without tokens from every host that reaches its address (anonymous clients allowed)", "addr", ln.Addr().String())
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.failed <- fmt.Errorf("http: %w", err)
		}
	}()
	s.logger.Info("HTTP listening", "addr", ln.Addr().String(), "api", s.cfg.Roles.API, "max_conns", limit)
	return nil
}

// startPprof serves the profiling endpoints on their own listener.
func (s *Server) startPprof(addr string) error {
	srv, bound, err := ops.ServePprof(addr)
	if err != nil {
		return err
	}
	s.pprof = srv
	s.logger.Info("pprof listening", "addr", bound.String())
	return nil
}

// run builds a pipeline, starts it and waits until it consumes.
func (s *Server) run(ctx context.Context, js jetstream.JetStream, cfg pipeline.Config, h pipeline.Handler) error {
	cfg.Timeout = s.cfg.pipelineTimeout(cfg)
	p, err := pipeline.New(cfg, js, s.publisher(js, jsstore.Decisions), h, s.registry, s.logger)
	if err != nil {
		return err
	}
	s.pipelines = append(s.pipelines, p)
	errc := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := p.Run(context.WithoutCancel(ctx)); err != nil {
			err = fmt.Errorf("%s: %w", cfg.Name, err)
			errc <- err
			s.failed <- err
		}
	}()
	select {
	case <-p.Running():
		return nil
	case err := <-errc:
		return err
	case <-time.After(s.cfg.StartupTimeout):
		return fmt.Errorf("%s did not start within %s", cfg.Name, s.cfg.StartupTimeout)
	}
}

// HTTPAddr is the HTTP address, such as 127.0.0.1:8080.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// NATSURL is the embedded server's client URL, or "" without one or without a port.
func (s *Server) NATSURL() string {
	if s.ns == nil || s.cfg.NATSListen == "" {
		return ""
	}
	return s.ns.ClientURL()
}

// NATSConnectedURL is the URL orderly's own connection to NATS uses, without
// credentials; "" before it connects.
func (s *Server) NATSConnectedURL() string {
	if s.nc == nil {
		return ""
	}
	return s.nc.ConnectedUrlRedacted()
}

// NATSPID is the process ID of the embedded server's own process, 0 when it
// runs in this process or there is no embedded server.
func (s *Server) NATSPID() int {
	if c, ok := s.ns.(*natsserver.ChildProcess); ok {
		return c.PID()
	}
	return 0
}

// CredentialsDir is where the embedded server's credentials are, "" without
// an embedded server.
func (s *Server) CredentialsDir() string { return s.creds.Dir }

// Failed delivers an error when a component stopped on its own.
func (s *Server) Failed() <-chan error { return s.failed }

// Shutdown stops the process gracefully: HTTP (in-flight requests finish; waits
// are cut short), pipelines (in-flight messages finish or are handed back for
// redelivery), NATS connection (drained), the embedded server. It is safe to
// call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() { s.shutErr = s.shutdown(ctx) })
	return s.shutErr
}

func (s *Server) shutdown(ctx context.Context) error {
	began := time.Now()
	s.stopping.Store(true)
	var errs []error
	if s.svc != nil {
		s.svc.Drain()
	}
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	if s.hub != nil {
		s.hub.Stop()
	}
	if s.durable != nil {
		s.durable.Stop()
	}
	for _, p := range s.pipelines {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.fault.stop()
	for _, b := range s.batchers {
		b.Stop()
		batches, msgs := b.Stats()
		s.logger.Debug("batched writes", "batches", batches, "messages", msgs)
	}
	if s.nc != nil {
		if err := jsstore.Drain(ctx, s.nc); err != nil {
			errs = append(errs, fmt.Errorf("%w, %s after the shutdown began", err, time.Since(began).Round(time.Millisecond)))
		}
	}
	s.wg.Wait()
	if s.pprof != nil {
		_ = s.pprof.Close()
	}
	if s.guard != nil {
		s.guard.Stop()
	}
	if s.ns != nil {
		s.ns.Shutdown()
	}
	if err := s.tracing.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("tracing: %w", err))
	}
	if err := s.lock.Release(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unboundedStore is the embedded server's JetStream storage limit when the
// disk guard bounds writes instead (1 PiB).
const unboundedStore = 1 << 50

// storeFault remembers the first critical error of the embedded store: after
// one, nats-server writes nothing more to that stream (or runs without
// JetStream) until it is restarted (docs/nats-facts.md, fact 6).
type storeFault struct {
	mu     sync.Mutex
	since  time.Time
	msg    string
	done   chan struct{}
	closed bool
}

// observe reads an error the embedded server logged.
func (f *storeFault) observe(msg string) {
	if !strings.Contains(msg, "Critical write error") && !strings.Contains(msg, "will be DISABLED") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		f.since, f.msg = time.Now(), msg
	}
}

// err is the fault, for readiness.
func (f *storeFault) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		return nil
	}
	return fmt.Errorf("the embedded store stopped writing at %s (%s); it writes again only after a restart of orderly, once the cause is fixed",
		f.since.UTC().Format(time.RFC3339), f.msg)
}

// dead is the fault once it has lasted grace, for liveness.
func (f *storeFault) dead(grace time.Duration) error {
	f.mu.Lock()
	since := f.since
	f.mu.Unlock()
	if since.IsZero() || time.Since(since) < grace {
		return nil
	}
	return f.err()
}

func (f *storeFault) stopped() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

func (f *storeFault) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
	}
	if !f.closed {
		close(f.done)
		f.closed = true
	}
}

// watchStore reports a store fault that outlived the grace period on
// Failed, once: the process cannot recover on its own.
func (s *Server) watchStore() {
	s.every(250*time.Millisecond, func() bool {
		err := s.fault.dead(s.cfg.StoreFaultGrace)
		if err == nil {
			return true
		}
		s.logger.Error("store fault outlived the grace period: stopping so that a supervisor restarts orderly", "grace", s.cfg.StoreFaultGrace, "err", err)
		select {
		case s.failed <- err:
		default:
		}
		return false
	})
}

// watchServer reports on Failed an embedded server that stopped on its own
// (its process died): orderly cannot work without it, and its supervisor
// restarts both.
func (s *Server) watchServer() {
	defer s.wg.Done()
	select {
	case <-s.ns.Done():
	case <-s.fault.stopped():
		return
	}
	if s.stopping.Load() {
		return
	}
	err := s.ns.Err()
	s.logger.Error("the embedded NATS server stopped: stopping so that a supervisor restarts orderly", "err", err)
	select {
	case s.failed <- err:
	default:
	}
}

// bodyDeadline gives a request's body BodyTimeout to arrive, and lifts the
// connection's read deadline once it has (or at once when there is none), so
// that a handler may then wait as long as it likes: the server's watch for a
// client that hangs up reads on with no deadline.
func bodyDeadline(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			_ = rc.SetReadDeadline(time.Now().Add(timeout))
			r.Body = &liftAtEOF{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		}
		h.ServeHTTP(w, r)
	})
}

// liftAtEOF calls lift once, when the body has been read to its end.
type liftAtEOF struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}

// spanErr marks span failed with err, and returns err.
func spanErr(span trace.Span, err error) error {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}
