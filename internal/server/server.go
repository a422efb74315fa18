// Package server assembles orderly's components into one process and owns
// their lifecycle: the embedded nats-server (unless a URL is given), the
// topology, the HTTP API, the processor and the projector. Start brings them up
// in order; Shutdown takes them down in reverse: HTTP first (stop accepting,
// finish in-flight requests), then the routers, then the NATS connections
// (drained), then the embedded server.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/natsx"
	"github.com/orderly-dev/orderly/internal/streams"
	"github.com/orderly-dev/orderly/internal/wm"
	"github.com/orderly-dev/orderly/processor"
	"github.com/orderly-dev/orderly/projections"
)

// Roles says which components run in this process.
type Roles struct {
	API, Processor, Projector bool
}

// AllRoles runs every component (orderly serve).
var AllRoles = Roles{API: true, Processor: true, Projector: true}

// Config configures a process.
type Config struct {
	// Roles to run.
	Roles Roles
	// HTTPAddr is the API's listen address (host:port; port 0 picks one).
	HTTPAddr string
	// DataDir holds the embedded server's JetStream files.
	DataDir string
	// NATSURL, when set, connects to that NATS instead of starting one.
	NATSURL string
	// NATSListen is the embedded server's client address; empty: in-process only.
	NATSListen string
	// NATSName names the embedded server.
	NATSName string
	// Cluster makes the embedded server a cluster node.
	Cluster *natsx.ClusterConfig
	// Fsync is the embedded server's durability mode.
	Fsync natsx.Fsync
	// Topology is the streams, buckets and consumers.
	Topology natsx.Topology
	// API configures the HTTP layer.
	API api.Config
	// RequestTimeout bounds each NATS call of an HTTP request (503 after it).
	RequestTimeout time.Duration
	// ResultCache is how many completed results the API keeps in memory.
	ResultCache int
	// Processor configures the processor.
	Processor processor.Config
	// ProjectorConcurrency is how many events the projector handles at once.
	ProjectorConcurrency int
	// ShutdownTimeout bounds Shutdown.
	ShutdownTimeout time.Duration
	// PprofAddr, when set, serves net/http/pprof there (never on the API's port).
	PprofAddr string
	// BatchWrites groups concurrent writes to a stream into atomic batches
	// (group commit): with fsync always, one sync per batch instead of per
	// message. Off by default: on a 2-core machine the batches that form are
	// small and the server's staging of each batch costs more than the syncs
	// it saves (docs/performance.md).
	BatchWrites bool
}

// DefaultConfig is the configuration of orderly serve.
func DefaultConfig() Config {
	return Config{
		Roles:                AllRoles,
		HTTPAddr:             "127.0.0.1:8080",
		DataDir:              "./data",
		NATSListen:           "127.0.0.1:4222",
		NATSName:             "orderly",
		Fsync:                natsx.Fsync{Interval: time.Second},
		Topology:             natsx.DefaultTopology(),
		API:                  api.DefaultConfig(),
		RequestTimeout:       2 * time.Second,
		ResultCache:          16384,
		Processor:            processor.DefaultConfig(),
		ProjectorConcurrency: 16,
		ShutdownTimeout:      40 * time.Second,
	}
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if !c.Roles.API && !c.Roles.Processor && !c.Roles.Projector {
		errs = append(errs, errors.New("no role to run"))
	}
	if c.NATSURL == "" && c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("http addr %q: %w", c.HTTPAddr, err))
	}
	if c.Roles.API {
		errs = append(errs, c.API.Validate())
		if c.RequestTimeout <= 0 {
			errs = append(errs, fmt.Errorf("nats timeout must be positive, got %s", c.RequestTimeout))
		}
		if c.ResultCache < 0 {
			errs = append(errs, fmt.Errorf("result cache must not be negative, got %d", c.ResultCache))
		}
	}
	if c.Roles.Processor {
		pcfg := c.Processor
		pcfg.AckWait, pcfg.MaxDeliver = c.Topology.AckWait, c.Topology.MaxDeliver
		errs = append(errs, pcfg.Validate())
	}
	if c.Roles.Projector && c.ProjectorConcurrency < 1 {
		errs = append(errs, fmt.Errorf("projector concurrency must be at least 1, got %d", c.ProjectorConcurrency))
	}
	errs = append(errs, c.Topology.Validate())
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("shutdown timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Server is a running orderly process.
type Server struct {
	cfg      Config
	logger   *slog.Logger
	ns       *server.Server
	nc       *nats.Conn
	hub      *projections.Hub
	svc      *app.Service
	http     *http.Server
	httpLn   net.Listener
	pprof    *http.Server
	routers  []router
	batchers []*natsx.Batcher
	registry *prometheus.Registry

	wg       sync.WaitGroup
	failed   chan error
	shutOnce sync.Once
	shutErr  error
}

type router interface {
	Run(ctx context.Context) error
	Running() <-chan struct{}
	Close() error
}

// Start brings a process up. On error everything started so far is stopped.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	s := &Server{cfg: cfg, logger: logger, failed: make(chan error, 4), registry: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			_ = s.Shutdown(sctx)
		}
	}()
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.PprofAddr != "" {
		if err := s.startPprof(cfg.PprofAddr); err != nil {
			return nil, err
		}
	}

	if cfg.NATSURL == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		abs, _ := filepath.Abs(cfg.DataDir)
		s.ns, err = natsx.StartEmbedded(ctx, natsx.EmbeddedConfig{
			ServerName: cfg.NATSName, StoreDir: abs, Listen: cfg.NATSListen,
			Fsync: cfg.Fsync, Cluster: cfg.Cluster, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		logger.Info("embedded NATS started", "store", abs, "client_url", s.NATSURL(), "fsync", cfg.Fsync.String())
	}

	// The components reach an embedded server over loopback TCP when it
	// listens: nats-server's in-process connection is a synchronous net.Pipe,
	// measurably slower under load (docs/performance.md).
	ns, url := s.ns, cfg.NATSURL
	if s.ns != nil && cfg.NATSListen != "" {
		ns, url = nil, s.ns.ClientURL()
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s.nc, err = natsx.Connect(cctx, url, ns, "main", logger)
	cancel()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	if err := cfg.Topology.Ensure(ctx, js); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	store, err := projections.OpenStore(ctx, js)
	if err != nil {
		return nil, err
	}

	// Every component of the process shares the one connection: measured
	// faster than a connection each (fewer, fuller socket writes; see
	// docs/performance.md), and a connection's subscriptions have their own
	// pending limits, so a slow one does not hold up the others.
	if cfg.Roles.Processor {
		if err := s.startProcessor(ctx, js, store); err != nil {
			return nil, err
		}
	}
	if cfg.Roles.Projector {
		if err := s.startProjector(ctx, js, store); err != nil {
			return nil, err
		}
	}
	if cfg.Roles.API {
		if err := s.startAPI(ctx, js, store); err != nil {
			return nil, err
		}
	} else if err := s.startOps(); err != nil {
		return nil, err
	}
	return s, nil
}

// startOps serves /healthz, /readyz and /metrics on the HTTP address of a
// process without the API (a processor or projector), for probes and scraping.
func (s *Server) startOps() error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.ready(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	return s.serveHTTP(mux)
}

// serveHTTP serves h on the configured HTTP address until Shutdown.
func (s *Server) serveHTTP(h http.Handler) error {
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listen: %w", err)
	}
	s.httpLn = ln
	s.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.failed <- fmt.Errorf("http: %w", err)
		}
	}()
	s.logger.Info("HTTP listening", "addr", ln.Addr().String(), "api", s.cfg.Roles.API)
	return nil
}

// batcher returns a new batcher on js, stopped at shutdown.
func (s *Server) batcher(js jetstream.JetStream) *natsx.Batcher {
	b := natsx.NewBatcher(js, 4, s.cfg.Topology.AckWait)
	s.batchers = append(s.batchers, b)
	return b
}

func (s *Server) startProcessor(ctx context.Context, wjs jetstream.JetStream, store *projections.Store) error {
	pcfg := s.cfg.Processor
	pcfg.AckWait, pcfg.MaxDeliver = s.cfg.Topology.AckWait, s.cfg.Topology.MaxDeliver
	var evPub natsx.Publisher = wjs
	if s.cfg.BatchWrites {
		evPub = s.batcher(wjs)
		store = store.WithPublisher(s.batcher(wjs))
	}
	p, err := processor.New(pcfg, wjs, evPub, store, s.logger)
	if err != nil {
		return err
	}
	decided := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderly_commands_decided_total",
		Help: "CreateOrder commands decided by the processor, by event kind.",
	}, []string{"kind"})
	s.registry.MustRegister(decided)
	p.OnDecided(func(k events.Kind, _ string) { decided.WithLabelValues(string(k)).Inc() })
	return s.run(ctx, "processor", p)
}

func (s *Server) startProjector(ctx context.Context, wjs jetstream.JetStream, store *projections.Store) error {
	if s.cfg.BatchWrites {
		store = store.WithPublisher(s.batcher(wjs))
	}
	p, err := projections.NewProjector(store, s.logger)
	if err != nil {
		return err
	}
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderly_events_skipped_total",
		Help: "Events the projector acked without projecting them, by reason.",
	}, []string{"reason"})
	s.registry.MustRegister(skipped)
	p.Skipped = func(reason string) { skipped.WithLabelValues(reason).Inc() }

	plog := s.logger.With("component", "projector")
	sub, err := wm.NewSubscriber(wjs, wm.SubscriberConfig{
		Stream: events.EventStream, Consumer: natsx.ProjectorConsumer,
		Concurrency: s.cfg.ProjectorConcurrency, Prefetch: 2 * s.cfg.ProjectorConcurrency,
		Backoff:      wm.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second},
		CloseTimeout: s.cfg.Topology.AckWait,
	}, plog)
	if err != nil {
		return err
	}
	r, err := newRouter(s.cfg.Topology.AckWait, wm.Logger(plog))
	if err != nil {
		return err
	}
	workers := wm.NewWorkers(s.cfg.ProjectorConcurrency)
	r.AddMiddleware(middleware.Recoverer, workers.Middleware)
	r.AddConsumerHandler("project", events.EventStream, sub, p.Handle)
	return s.run(ctx, "projector", routerAdapter{Router: r, after: workers.Stop})
}

func (s *Server) startAPI(ctx context.Context, js jetstream.JetStream, store *projections.Store) error {
	hub, err := projections.NewHub(store, projections.HubConfig{CacheSize: s.cfg.ResultCache}, s.logger)
	if err != nil {
		return err
	}
	if err := hub.Start(ctx); err != nil {
		return err
	}
	s.hub = hub
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "orderly_waiters",
		Help: "Requests waiting for a decision (POST) or a change (GET ?wait=).",
	}, func() float64 { return float64(hub.Waiters()) }))
	var cmdPub natsx.Publisher = js
	if s.cfg.BatchWrites {
		cmdPub = s.batcher(js)
	}
	log, err := streams.OpenLog(ctx, js, cmdPub)
	if err != nil {
		return err
	}
	health := natsx.WatchHealth(js.Conn())
	svc, err := app.NewService(app.Config{RequestTimeout: s.cfg.RequestTimeout, Up: health.Up}, store, hub, log, log, s.logger)
	if err != nil {
		return err
	}
	s.svc = svc
	h, err := api.NewHandler(s.cfg.API, svc, s.ready, s.registry, s.logger)
	if err != nil {
		return err
	}
	return s.serveHTTP(h)
}

// startPprof serves the profiling endpoints on their own listener.
func (s *Server) startPprof(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pprof listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s.pprof = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.pprof.Serve(ln) }()
	s.logger.Info("pprof listening", "addr", ln.Addr().String())
	return nil
}

// run starts a router and waits until it runs.
func (s *Server) run(ctx context.Context, name string, r router) error {
	s.routers = append(s.routers, r)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := r.Run(context.WithoutCancel(ctx)); err != nil {
			s.failed <- fmt.Errorf("%s: %w", name, err)
		}
	}()
	select {
	case <-r.Running():
		return nil
	case err := <-s.failed:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s did not start within 30s", name)
	}
}

// ready is nil when every connection is up and JetStream answers.
func (s *Server) ready(ctx context.Context) error {
	if !s.nc.IsConnected() {
		return fmt.Errorf("NATS connection is %s", s.nc.Status())
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	return nil
}

// HTTPAddr is the API's address, such as 127.0.0.1:8080.
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

// Failed delivers an error when a component stopped on its own.
func (s *Server) Failed() <-chan error { return s.failed }

// Shutdown stops the process gracefully: HTTP (in-flight requests finish; waits
// are cut short), routers (in-flight messages finish or stay unacked for
// redelivery), NATS connections (drained), the embedded server. It is safe to
// call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() { s.shutErr = s.shutdown(ctx) })
	return s.shutErr
}

func (s *Server) shutdown(ctx context.Context) error {
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
	for _, r := range s.routers {
		if err := r.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, b := range s.batchers {
		b.Stop()
		batches, msgs := b.Stats()
		s.logger.Debug("batched writes", "batches", batches, "messages", msgs)
	}
	if s.nc != nil {
		if err := drain(ctx, s.nc); err != nil {
			errs = append(errs, err)
		}
	}
	s.wg.Wait()
	if s.pprof != nil {
		_ = s.pprof.Close()
	}
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// drain drains nc and waits until it is closed.
func drain(ctx context.Context, nc *nats.Conn) error {
	if nc.IsClosed() {
		return nil
	}
	closed := make(chan struct{})
	var once sync.Once
	nc.SetClosedHandler(func(*nats.Conn) { once.Do(func() { close(closed) }) })
	if err := nc.Drain(); err != nil || nc.IsClosed() {
		nc.Close()
		return nil
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("drain %s: %w", nc.Opts.Name, ctx.Err())
	}
}

// routerAdapter gives a watermill router the router interface; after runs once
// the router is closed.
type routerAdapter struct {
	*message.Router
	after func()
}

func (r routerAdapter) Running() <-chan struct{} { return r.Router.Running() }

func (r routerAdapter) Close() error {
	err := r.Router.Close()
	r.after()
	return err
}

func newRouter(closeTimeout time.Duration, logger watermill.LoggerAdapter) (*message.Router, error) {
	return message.NewRouter(message.RouterConfig{CloseTimeout: closeTimeout}, logger)
}
