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
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

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
)

// intake is what the processor's yield looks at (Config.DecisionLag): who
// waits for decisions, and how many commands the API has stored.
type intake struct {
	hub *hub.Hub
	svc *app.Service
}

// Server is a running orderly process.
type Server struct {
	cfg     Config
	logger  *slog.Logger
	ns      natsserver.Instance
	nc      *nats.Conn
	hub     *hub.Hub
	intake  atomic.Pointer[intake] // the API, for the processor's yield (set after the processor starts)
	yield   *pipeline.Yield        // the processor's, with --decision-lag: the API's Retry-After reads it
	durable *durable.Syncer        // with --fsync group: the answers' group commit
	svc     *app.Service
	tokens  *api.Tokens  // the API's, when it has the API role
	ops     *ops.Handler // /healthz, /readyz and /metrics
	// tokenReloads counts ReloadTokens' outcomes.
	tokenReloads *prometheus.CounterVec
	http         *http.Server
	httpLn       net.Listener
	pprof        *http.Server
	pipelines    []*pipeline.Pipeline
	batchers     []*jsstore.Batcher
	registry     *prometheus.Registry
	guard        *jsstore.DiskGuard
	writes       jsstore.WriteHealth
	fault        storeFault
	creds        natsauth.Credentials
	tlsCA        string // the embedded server's CA when it requires TLS
	stopping     atomic.Bool

	wg       sync.WaitGroup
	failed   chan error
	lock     *datadir.Lock // of the data directory, with the embedded server
	tracing  *tracing.Provider
	tracer   trace.Tracer
	shutOnce sync.Once
	shutErr  error
}

// CheckConfig is cfg.Validate's refusal as Start gives it, so that a
// command can refuse a configuration before it logs or does anything else.
func CheckConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}

// Start brings a process up. On error everything started so far is stopped.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Server, err error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, err
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
	// Fail at once on what would stop the start later, before anything is
	// created: a data directory another process holds (named first, so
	// that a second orderly on the same directory and ports hears who
	// holds it), then ports that cannot be had. A directory that does not
	// exist yet is created and locked only after the ports.
	embedded := cfg.NATSURL == ""
	if _, statErr := os.Stat(cfg.DataDir); embedded && statErr == nil {
		if err := s.lockDataDir(); err != nil {
			return nil, err
		}
	}
	if err := checkHTTPAddr(cfg.HTTPAddr); err != nil {
		return nil, err
	}
	if embedded {
		if err := natsserver.CheckListen(cfg.NATSListen); err != nil {
			return nil, err
		}
	}
	tcfg := cfg.Tracing
	if tcfg.Service == "" {
		tcfg.Service = "orderly-" + s.user()
	}
	if tcfg.Version == "" {
		tcfg.Version = cfg.Version
	}
	if s.tracing, err = tracing.Start(ctx, tcfg, logger); err != nil {
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
	s.writes.Follow(s.nc)
	reconnects, moves := connectionMetrics(s.nc)
	s.registry.MustRegister(newTLSExpiry(s.nc), reconnects, moves, newStreamReplicas(js, streamsOf(cfg.Roles)), newAccountStore(js))
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
		{Name: "jetstream", Run: jetStreamReady(js)},
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
	for _, p := range s.pipelines {
		ready = append(ready, ops.Check{Name: p.Name() + "_consumer", Run: func(context.Context) error { return p.Consuming() }})
	}
	live := []ops.Check{{Name: "store", Run: func(context.Context) error { return s.fault.dead(cfg.StoreFaultGrace) }}}
	if s.ns != nil {
		s.wg.Add(2)
		go s.watchStore()
		go s.watchServer()
	} else {
		s.wg.Add(1)
		go s.watchNATSNode(js, moves)
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
		s.ops = opsHandler
		return s, s.serveHTTP(opsHandler)
	}
	return s, s.startAPI(ctx, js, ready, live)
}

// connect starts the embedded server (unless a URL is given) and connects.
// With the embedded server, it creates the credentials on first start and
// sets the topology up over a short-lived operator connection; the process
// then works as the serve user. Against a URL it connects with the given
// credentials, as the user of its roles.
// lockDataDir takes the data directory for this process (creating it), once.
func (s *Server) lockDataDir() error {
	if s.lock != nil {
		return nil
	}
	abs, _ := filepath.Abs(s.cfg.DataDir)
	lock, err := datadir.Acquire(abs)
	if err != nil {
		return err
	}
	s.lock = lock
	return nil
}

func (s *Server) connect(ctx context.Context) (jetstream.JetStream, error) {
	ccfg := jsstore.ConnectConfig{URL: s.cfg.NATSURL, Name: "main", Credentials: s.cfg.Credentials,
		InboxPrefix: s.cfg.InboxPrefix, OnClosed: s.closed}
	if ccfg.InboxPrefix == "" {
		ccfg.InboxPrefix = natsauth.InboxPrefix(s.user())
	}
	if s.cfg.NATSURL == "" {
		abs, _ := filepath.Abs(s.cfg.DataDir)
		if err := s.lockDataDir(); err != nil {
			return nil, err
		}
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
			DedupWindow: s.cfg.Topology.DedupWindow, MemoryLimit: s.cfg.NATSMemoryLimit,
		}
		if s.cfg.embeddedTLS() {
			if err := s.embeddedTLSFiles(&ncfg); err != nil {
				return nil, err
			}
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
		if s.cfg.NATSListen != "" && !LoopbackOnly(s.cfg.NATSListen) && !s.cfg.embeddedTLS() {
			// The users' keys authenticate every client, but without TLS
			// what crosses the network can be read.
			s.logger.Warn("embedded NATS can be reached from other hosts, without TLS (--nats-tls off): its clients' orders and events cross the network in clear text; keep --nats-listen on loopback or a network you trust, or leave --nats-tls at auto (docs/security.md)",
				"addr", s.cfg.NATSListen)
		}
		// The components reach the embedded server over loopback TCP: it
		// always listens, on a port of its own without --nats-listen.
		ccfg.URL = loopbackURL(s.ns.ClientURL())
		setup := jsstore.ConnectConfig{URL: ccfg.URL, Name: "setup",
			Credentials: jsstore.Credentials{NkeyFile: s.creds.SeedPath(natsauth.Operator), CAFile: s.NATSCA()}}
		topo := s.cfg.Topology
		topo.Projector = topo.Projector || s.cfg.Roles.Projector
		if err := Setup(ctx, SetupConfig{Connect: setup, Topology: topo, StartupTimeout: s.cfg.StartupTimeout}, s.logger); err != nil {
			return nil, err
		}
		ccfg.Credentials = jsstore.Credentials{NkeyFile: s.creds.SeedPath(natsauth.Serve), CAFile: s.NATSCA()}
		ccfg.InboxPrefix = natsauth.InboxPrefix(natsauth.Serve)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.StartupTimeout)
	defer cancel()
	nc, err := jsstore.Connect(cctx, ccfg, s.logger)
	if err != nil {
		return nil, err
	}
	s.nc = nc
	return jsstore.NewJetStream(nc, ccfg.Credentials.JSDomain, 5*time.Second)
}

// embeddedTLSFiles makes the embedded server's CA and certificate in the
// credentials directory, or issues the certificate again (natsauth.InitTLS),
// and gives them to ncfg.
func (s *Server) embeddedTLSFiles(ncfg *natsserver.Config) error {
	issued, err := s.issueTLS()
	if err != nil {
		return err
	}
	ca := s.creds.TLSPath(natsauth.TLSCAFile)
	attrs := []any{"ca", ca, "hosts", strings.Join(issued.Hosts, ","), "expires", issued.Expires.Format(time.DateOnly)}
	if issued.Node {
		attrs = append(attrs, "issued", issued.Reason, "new_ca", issued.CA)
	}
	s.logger.Info("embedded NATS requires TLS of its clients, who trust its CA (nats --tlsca, --nats-ca)", attrs...)
	ncfg.TLSCert, ncfg.TLSKey = s.creds.TLSPath(natsauth.TLSNodeFile), s.creds.TLSPath(natsauth.TLSNodeKeyFile)
	s.tlsCA = ca
	return nil
}

// issueTLS makes the embedded server's CA and certificate, or issues the
// certificate again, when they are missing, lack a name or expire within 30
// days (natsauth.InitTLS), and checks them.
func (s *Server) issueTLS() (natsauth.TLSIssued, error) {
	issued, err := s.creds.InitTLS(embeddedTLSHosts(s.cfg.NATSListen, s.cfg.NATSTLSHosts))
	if err != nil {
		return issued, err
	}
	return issued, s.creds.CheckTLS()
}

// RenewNATSTLS issues the embedded server's certificate again when it is
// due (within 30 days of its end, a name missing, the file gone), as a start
// does; the server presents the new one to the clients that connect from
// then on, those connected keep their session. orderly calls it on SIGHUP.
// ok is false without an embedded server with TLS.
func (s *Server) RenewNATSTLS() (issued natsauth.TLSIssued, ok bool, err error) {
	if s.tlsCA == "" {
		return issued, false, nil
	}
	issued, err = s.issueTLS()
	return issued, true, err
}

// embeddedTLSHosts are the names the embedded server's certificate holds
// beyond natsauth.DefaultTLSHosts: the listen host, this host's name, and,
// for an unspecified listen host (0.0.0.0, ::), the addresses of this
// host's interfaces, so that a client on another host may connect by
// any of them; then extra.
func embeddedTLSHosts(listen string, extra []string) []string {
	var hosts []string
	host, _, _ := net.SplitHostPort(listen)
	ip, err := netip.ParseAddr(host)
	switch {
	case host == "" || err == nil && ip.IsUnspecified():
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().IsGlobalUnicast() {
				hosts = append(hosts, ip.Unmap().String())
			}
		}
	case natsauth.ValidTLSHost(host):
		hosts = append(hosts, host)
	}
	if name, err := os.Hostname(); err == nil && natsauth.ValidTLSHost(name) {
		hosts = append(hosts, name)
	}
	return append(hosts, extra...)
}

// loopbackURL is a client URL whose unspecified or empty host (a server
// listening on 0.0.0.0, :: or every address) is the loopback address,
// which the embedded server's certificate holds.
func loopbackURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	ip, err := netip.ParseAddr(p.Hostname())
	if p.Hostname() != "" && (err != nil || !ip.IsUnspecified()) {
		return u
	}
	lo := "127.0.0.1"
	if err == nil && ip.Is6() {
		lo = "::1"
	}
	p.Host = net.JoinHostPort(lo, p.Port())
	return p.String()
}

// NATSCA is the CA file of the embedded server's TLS, "" without TLS or
// without an embedded server.
func (s *Server) NATSCA() string { return s.tlsCA }

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

// HTTPAddr is the HTTP address, such as 127.0.0.1:8080.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// NATSURL is the embedded server's client URL, or "" without one or without
// a port. A server listening on every address (0.0.0.0, ::) is named by its
// loopback address.
func (s *Server) NATSURL() string {
	if s.ns == nil || s.cfg.NATSListen == "" {
		return ""
	}
	return loopbackURL(s.ns.ClientURL())
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

// ReloadTokens replaces the API's bearer tokens with what read returns,
// while the API serves (see api.Tokens.Replace): orderly calls it on SIGHUP
// to read --tokens-file again. A read that fails, or a set Replace
// refuses, changes nothing; orderly_tokens_reloads_total counts both
// outcomes. It fails for a process without the API role.
func (s *Server) ReloadTokens(read func() (map[string]string, error)) (api.TokenChange, error) {
	if s.tokens == nil {
		return api.TokenChange{}, errors.New("this process does not serve the API")
	}
	tokens, err := read()
	var c api.TokenChange
	if err == nil {
		c, err = s.tokens.Replace(tokens)
	}
	if err != nil {
		s.tokenReloads.WithLabelValues("refused").Inc()
		return c, err
	}
	s.tokenReloads.WithLabelValues("reloaded").Inc()
	return c, nil
}

// SetMetricsToken replaces the token /metrics asks for (--metrics-token-file
// read again on SIGHUP).
func (s *Server) SetMetricsToken(token string) error {
	if s.ops == nil {
		return errors.New("this process serves no /metrics")
	}
	return s.ops.SetMetricsToken(token)
}

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

// closeTogether closes every closer at once and returns their errors. The
// pipelines close this way: each waits up to its CloseTimeout for the
// messages in hand, so one after the other a process with two (serve with
// --roles api,processor,projector) would wait up to twice as long.
func closeTogether[C io.Closer](cs []C) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Close() })
	}
	wg.Wait()
	return errs
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
	errs = append(errs, closeTogether(s.pipelines)...)
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
