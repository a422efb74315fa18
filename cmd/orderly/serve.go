package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/ops"
	"github.com/orderly-dev/orderly/internal/server"
)

// CredFlags are the NATS credentials of every command that connects to NATS.
type CredFlags struct {
	NkeyFile  string `name:"nats-nkey" env:"ORDERLY_NATS_NKEY" type:"path" help:"nkey seed file of the NATS user to connect as (orderly serve writes one per user under <data-dir>/credentials)."`
	CredsFile string `name:"nats-creds" env:"ORDERLY_NATS_CREDS" type:"path" help:"NATS .creds file (a JWT and its seed) to connect with."`
	User      string `name:"nats-user" env:"ORDERLY_NATS_USER" help:"NATS user name, with --nats-password."`
	Password  string `name:"nats-password" env:"ORDERLY_NATS_PASSWORD" help:"NATS password (prefer the environment variable: a flag shows in the process list)."`
	CAFile    string `name:"nats-ca" env:"ORDERLY_NATS_CA" type:"path" help:"PEM file of the CA(s) that signed the NATS servers' TLS certificates: the connection then requires TLS (also with nats:// URLs) and trusts these CAs only; read again at every reconnect. For NATS reached over a network you do not control (docs/security.md)."`
	CertFile  string `name:"nats-cert" env:"ORDERLY_NATS_CERT" type:"path" help:"PEM client certificate to present to NATS servers that ask for one (tls { verify: true }), with --nats-key; read again at every reconnect. orderly's own cluster does not ask: the nkeys authenticate."`
	KeyFile   string `name:"nats-key" env:"ORDERLY_NATS_KEY" type:"path" help:"PEM key of --nats-cert."`
	JSDomain  string `name:"nats-js-domain" env:"ORDERLY_NATS_JS_DOMAIN" help:"JetStream domain of orderly's streams, when it is not the connected server's: a leaf node with a JetStream of its own reaches its hub's domain this way. Empty: the connected server's JetStream. Not with the embedded server."`
}

func (c CredFlags) credentials() jsstore.Credentials {
	return jsstore.Credentials{NkeyFile: c.NkeyFile, CredsFile: c.CredsFile, User: c.User, Password: c.Password, CAFile: c.CAFile,
		CertFile: c.CertFile, KeyFile: c.KeyFile, JSDomain: c.JSDomain}
}

// NATSFlags locate NATS for the roles.
type NATSFlags struct {
	NATSURL        string        `name:"nats-url" env:"ORDERLY_NATS_URL" help:"NATS server URL(s), comma-separated. Empty: start an embedded server (serve only)."`
	NATSTimeout    time.Duration `name:"nats-timeout" env:"ORDERLY_NATS_TIMEOUT" default:"10s" positive:"" help:"Budget of each NATS operation of an HTTP request, retries included: a read or publish that meets an unavailable NATS (a leader election takes 4-9 s) is tried again until it succeeds or this runs out (then 503: service_unavailable when nothing was stored, outcome_unknown when the order may have been). A lost connection is waited for 500ms at most."`
	StartupTimeout time.Duration `name:"startup-timeout" env:"ORDERLY_STARTUP_TIMEOUT" default:"2m" positive:"" help:"How long to wait at start for NATS, JetStream and the topology (a cluster that is still forming, a server that starts later, orderly setup not run yet)."`
	CredFlags
}

// TopologyFlags are the streams' settings, for the commands that set the
// topology up (serve with its embedded server, and setup).
type TopologyFlags struct {
	Replicas         int           `name:"replicas" env:"ORDERLY_REPLICAS" default:"0" help:"Replicas of the streams, the bucket and the consumers (3 on a cluster). 0: 1 when they are created, and existing ones as they are. A value that differs from the existing streams is refused, unless --update-topology."`
	UpdateTopology   bool          `name:"update-topology" env:"ORDERLY_UPDATE_TOPOLOGY" help:"Bring existing streams, the bucket and the consumers to these settings (windows, retentions, TTL, ack wait, replicas). Without it they are only created when missing; differences are logged and left alone."`
	DedupWindow      time.Duration `name:"dedup-window" env:"ORDERLY_DEDUP_WINDOW" default:"2m" help:"Duplicate window of the command stream: the broker drops a retry whose key it stored less than this long ago."`
	ResultTTL        time.Duration `name:"result-ttl" env:"ORDERLY_RESULT_TTL" default:"24h" help:"How long a stored result answers retries of its key; afterwards the key is free and makes a new order."`
	CommandRetention time.Duration `name:"command-retention" env:"ORDERLY_COMMAND_RETENTION" default:"72h" help:"How long commands stay stored; a processor outage longer than this loses accepted commands."`
	EventRetention   time.Duration `name:"event-retention" env:"ORDERLY_EVENT_RETENTION" default:"168h" help:"How long events stay in ORDER_EVENTS (7 days, the retention Kafka users know); 0 keeps them for ever. At least --result-ttl. Every retained order costs about 1.3 KB of disk and one entry of the server's subject index (docs/operations.md)."`
}

func (t TopologyFlags) topology() jsstore.Topology {
	topo := jsstore.DefaultTopology()
	topo.Replicas = t.Replicas
	topo.Update = t.UpdateTopology
	topo.DedupWindow = t.DedupWindow
	topo.ResultTTL = t.ResultTTL
	topo.CommandRetention = t.CommandRetention
	topo.EventRetention = t.EventRetention
	return topo
}

// RunFlags are the settings of every long-running process: its HTTP
// listener (the API, or a processor's or projector's /healthz, /readyz and
// /metrics), its writes and its runtime.
type RunFlags struct {
	HTTPAddr         string  `name:"http-addr" env:"ORDERLY_HTTP_ADDR" default:"127.0.0.1:8080" help:"HTTP listen address (the API, or a processor's or projector's /healthz, /readyz and /metrics)."`
	BatchWrites      string  `name:"batch-writes" env:"ORDERLY_BATCH_WRITES" enum:"auto,on,off" default:"auto" help:"Group concurrent writes to each stream into atomic batches, one commit and one disk sync per batch (group commit): on, off, or auto: on with serve --fsync always, where it raised the sync rate by 30-80% (docs/adr/0009), off otherwise (against --nats-url, set it on when the servers sync every write)."`
	MemoryLimit      string  `name:"memory-limit" env:"ORDERLY_MEMORY_LIMIT" default:"auto" help:"Soft limit of the Go runtime's memory, such as 400MiB (at least 64MiB): the garbage collector works harder to stay under it (docs/operations.md). auto: 90% of the container's (cgroup) memory limit when there is one and GOMEMLIMIT is not set, else none; off: none. With serve --nats-process child the two processes share the limit: orderly's takes a quarter, its NATS server's three quarters."`
	MetricsTokenFile string  `name:"metrics-token-file" env:"ORDERLY_METRICS_TOKEN_FILE" type:"path" help:"File holding one random token (at least 16 characters) that GET /metrics then asks every client for, as Authorization: Bearer <token> (Prometheus: authorization.credentials_file). Without it /metrics answers clients on this host (loopback) only: its counts tell whoever reaches the port how much business goes through it. SIGHUP reads the file again (one without a valid token changes nothing)."`
	PprofAddr        string  `name:"pprof-addr" env:"ORDERLY_PPROF_ADDR" help:"Serve Go profiles (net/http/pprof, no authentication) on this loopback address, such as 127.0.0.1:6060 (others are refused); empty: off."`
	OTLPEndpoint     string  `name:"otlp-endpoint" env:"ORDERLY_OTLP_ENDPOINT,OTEL_EXPORTER_OTLP_ENDPOINT" placeholder:"URL" help:"Export trace spans over OTLP/HTTP to this endpoint, an http or https URL such as http://localhost:4318 (Jaeger, an OpenTelemetry collector); failed exports are logged at most once a minute. Empty: no spans are exported; the W3C trace context still travels from the request to the events and into the logs."`
	TraceRatio       float64 `name:"trace-sample-ratio" env:"ORDERLY_TRACE_SAMPLE_RATIO" default:"1" help:"Share of the traces started here that are exported, from 0 to 1 (a request whose traceparent says sampled always is, so 0 exports only those)."`
}

// APIFlags are the HTTP API's settings.
type APIFlags struct {
	Wait           time.Duration `name:"wait" env:"ORDERLY_WAIT" default:"2s" help:"How long a POST waits for its result before it answers 202 (0: 202 as soon as the command is stored, as Prefer: respond-async)."`
	MaxWait        time.Duration `name:"max-wait" env:"ORDERLY_MAX_WAIT" default:"30s" positive:"" help:"Cap on Prefer: wait=N and on GET ?wait=: more than 0, at least --wait."`
	BodyLimit      string        `name:"body-limit" env:"ORDERLY_BODY_LIMIT" default:"64KiB" help:"Largest request body (413 above): a size such as 64KiB or 1MiB, or a number of bytes; at least 1KiB."`
	HeaderTimeout  time.Duration `name:"http-header-timeout" env:"ORDERLY_HTTP_HEADER_TIMEOUT" default:"10s" help:"How long a client may take to send a request's headers."`
	BodyTimeout    time.Duration `name:"http-body-timeout" env:"ORDERLY_HTTP_BODY_TIMEOUT" default:"10s" help:"How long a client may take to send a request body (408 after, nothing stored). Long polls are not limited by it."`
	IdleTimeout    time.Duration `name:"http-idle-timeout" env:"ORDERLY_HTTP_IDLE_TIMEOUT" default:"60s" help:"How long a keep-alive connection may stay idle."`
	MaxHeaderBytes string        `name:"http-max-header-bytes" env:"ORDERLY_HTTP_MAX_HEADER_BYTES" default:"32KiB" help:"Largest size of a request's headers (431 above): a size such as 32KiB, or a number of bytes; at least 4KiB."`
	MaxConns       int           `name:"http-max-conns" env:"ORDERLY_HTTP_MAX_CONNS" default:"0" help:"Most HTTP connections open at once; more wait in the listen queue, so that clients never take the file descriptors the store needs. 0: half of the open-file limit (ulimit -n), between 64 and 16384."`
	TokensFile     string        `name:"tokens-file" env:"ORDERLY_TOKENS_FILE" type:"path" help:"File of 'tenant token' lines (random tokens of at least 16 characters). When set, requests need Authorization: Bearer <token> and keys are scoped by tenant; SIGHUP reads the file again (a file without a valid set changes nothing). Needed when --http-addr can be reached from other hosts, unless --http-anonymous."`
	HTTPAnonymous  bool          `name:"http-anonymous" env:"ORDERLY_HTTP_ANONYMOUS" help:"Serve /v1 without --tokens-file on an --http-addr that other hosts can reach (every client is tenant default). Without it orderly refuses to start there: anyone who reached the port could place orders. Only where something in front of orderly authenticates the clients, or every host that can reach the port is trusted. On a loopback address no tokens are needed."`
	ResultCache    int           `name:"result-cache" env:"ORDERLY_RESULT_CACHE" default:"16384" help:"How many completed results the API keeps in memory for replays (about 1 KiB each); 0: none, every replay reads its key's event."`
	OrderIDs       string        `name:"order-ids" env:"ORDERLY_ORDER_IDS" enum:"auto,nonce,keyed" default:"auto" help:"Form of the IDs of new orders. keyed: ord_ + 13 characters of the command's sequence + 20 of the hashed idempotency key; the order's event, on orders.events.<kind>.<key>.<seq>, is its key's claim (two stored messages per order, nothing in ORDER_RESULTS), and an order that loses its key stores no event and reads as 303 to the holder (docs/adr/0010). nonce: ord_ + the sequence + 13 random characters, the key claimed in ORDER_RESULTS. auto: the form stored with the topology (keyed when this version created it; orderly setup --order-ids changes it), followed as it changes."`
}

// ProcessorFlags are the processor's settings.
type ProcessorFlags struct {
	Concurrency int `name:"processor-concurrency" env:"ORDERLY_PROCESSOR_CONCURRENCY" default:"1024" help:"Commands one processor has in hand at once, handled in batches of up to a quarter of it (each batch waits once for its claims and once for its events: docs/adr/0011)."`
}

// ProjectorFlags are the optional projector's settings.
type ProjectorFlags struct {
	ProjConcurrency int `name:"projector-concurrency" env:"ORDERLY_PROJECTOR_CONCURRENCY" default:"128" help:"Events one projector handles at once."`
}

// ServeCmd runs everything in one process.
type ServeCmd struct {
	NATSFlags
	TopologyFlags
	RunFlags
	APIFlags
	ProcessorFlags
	ProjectorFlags
	DataDir         string        `name:"data-dir" env:"ORDERLY_DATA_DIR" default:"./data" type:"path" help:"Where the embedded NATS server keeps its data, and the NATS credentials (credentials/*.nk, mode 0600)."`
	NATSListen      string        `name:"nats-listen" env:"ORDERLY_NATS_LISTEN" default:"127.0.0.1:4222" help:"Client address of the embedded NATS server, for the nats CLI and other services (with the credentials under <data-dir>/credentials); empty: no port for others (orderly itself reaches the server, in a child process or in its own, over a random loopback port, with the same credentials)."`
	NATSTLS         string        `name:"nats-tls" env:"ORDERLY_NATS_TLS" enum:"auto,on,off" default:"auto" help:"Whether the embedded NATS server's client port requires TLS: auto (when --nats-listen can be reached from other hosts), on or off (a network you trust). Its CA and certificate are made in <data-dir>/credentials (tls-ca.pem: give it to the clients, nats --tlsca or --nats-ca), the certificate is issued again at start and on SIGHUP when it lacks a name or expires within 30 days, and served to the next client without a restart; orderly's own connection trusts the CA."`
	NATSTLSHosts    []string      `name:"nats-tls-host" env:"ORDERLY_NATS_TLS_HOSTS" help:"Names and addresses clients on other hosts reach the embedded NATS server at, for its TLS certificate (repeatable or comma-separated), besides the --nats-listen host, this host's name and, when it listens on every address, this host's addresses."`
	NATSProcess     string        `name:"nats-process" env:"ORDERLY_NATS_PROCESS" enum:"in-process,child" default:"in-process" help:"Where the embedded NATS server runs: in-process (one process; on a 2-core host 25-35% more orders a second than child, docs/adr/0016) or child (a process of its own, started from this binary, that dies with orderly: the server's garbage collection and memory stay out of orderly's process, docs/adr/0014)."`
	NATSPprofAddr   string        `name:"nats-pprof-addr" env:"ORDERLY_NATS_PPROF_ADDR" help:"Serve the Go profiles of the embedded NATS server's own process (net/http/pprof, no authentication) on this loopback address, such as 127.0.0.1:6061 (others are refused); empty: off. With --nats-process in-process, --pprof-addr profiles both."`
	Roles           []string      `name:"roles" env:"ORDERLY_ROLES" default:"api,processor" enum:"api,processor,projector" help:"Components to run in this process: api, processor, projector. The projector is optional: the processor stores each key's response itself; a projector writes the same responses again from the events (after restoring ORDER_EVENTS alone, or to complete the keys an earlier version left pending)."`
	Fsync           string        `name:"fsync" env:"ORDERLY_FSYNC" default:"1s" help:"When the embedded server syncs to disk: 'always' (every write before its ack; survives power loss), 'group' (every answer waits for a sync that many concurrent answers share: what clients are told survives power loss, at about twice the rate of always; event consumers may see an event that power loss takes back) or an interval such as 1s (survives a process crash, not power loss). See docs/adr/0002 and 0012."`
	MinFreeSpace    string        `name:"min-free-space" env:"ORDERLY_MIN_FREE_SPACE" default:"256MiB" help:"Free space of the data directory's file system below which new orders are refused (503, not ready) while accepted ones are still decided (down to half of it), so that the store never runs out of space. 0 turns the guard off."`
	DecisionLag     time.Duration `name:"decision-lag" env:"ORDERLY_DECISION_LAG" default:"0s" help:"Let decisions trail the accepted commands by up to this long while the processor is behind and no request waits for a decision (a sync POST, a GET ?wait=): the API then has the cores and accepts bursts of async orders faster, and the backlog is decided after them (docs/adr/0015). A waiting request ends the pause at once; while it lasts, pending answers say Retry-After: the lag. A burst no longer than the lag is taken in whole at the API's own rate; a longer load ends with about the lag's worth of backlog. 0: decide at once."`
	StoreFaultGrace time.Duration `name:"store-fault-grace" env:"ORDERLY_STORE_FAULT_GRACE" default:"30s" help:"After a critical write error (a full disk the guard did not prevent, a failing disk, no file descriptors) the embedded store writes again only after a restart: orderly reports not ready at once and, after this grace, fails /healthz and exits with status 1 so that its supervisor restarts it."`
}

// Run runs orderly serve.
func (c *ServeCmd) Run(g *globals) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	return runServer(g, cfg, c.MemoryLimit, c.TokensFile, c.MetricsTokenFile)
}

// config is the server configuration the flags describe.
func (c *ServeCmd) config() (server.Config, error) {
	var roles server.Roles
	for _, r := range c.Roles {
		switch r {
		case "api":
			roles.API = true
		case "processor":
			roles.Processor = true
		case "projector":
			roles.Projector = true
		}
	}
	cfg, err := c.RunFlags.config(roles)
	if err != nil {
		return cfg, err
	}
	if err := c.APIFlags.apply(&cfg); err != nil {
		return cfg, err
	}
	c.ProcessorFlags.apply(&cfg)
	c.ProjectorFlags.apply(&cfg)
	c.NATSFlags.apply(&cfg)
	cfg.Topology = c.TopologyFlags.topology()
	cfg.DataDir = c.DataDir
	cfg.NATSListen = c.NATSListen
	cfg.NATSProcess = c.NATSProcess
	cfg.NATSTLS = c.NATSTLS
	cfg.NATSTLSHosts = c.NATSTLSHosts
	cfg.NATSPprofAddr = c.NATSPprofAddr
	if cfg.Fsync, err = natsserver.ParseFsync(c.Fsync); err != nil {
		return cfg, err
	}
	if c.BatchWrites == "auto" {
		cfg.BatchWrites = cfg.Fsync.Always
	}
	if cfg.MinFreeSpace, err = parseSize("--min-free-space", c.MinFreeSpace); err != nil {
		return cfg, err
	}
	cfg.StoreFaultGrace = c.StoreFaultGrace
	cfg.DecisionLag = c.DecisionLag
	return cfg, nil
}

// APICmd is orderly api: the HTTP API alone, against a NATS cluster.
type APICmd struct {
	NATSFlags
	RunFlags
	APIFlags
}

// config is the API's configuration of the flags.
func (c *APICmd) config() (server.Config, error) {
	cfg, err := c.RunFlags.config(server.Roles{API: true})
	if err != nil {
		return cfg, err
	}
	return cfg, c.APIFlags.apply(&cfg)
}

// Run runs the API.
func (c *APICmd) Run(g *globals) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	return runRole(g, c.NATSFlags, cfg, c.MemoryLimit, c.TokensFile, c.MetricsTokenFile)
}

// ProcessorCmd is orderly processor: the processor alone.
type ProcessorCmd struct {
	NATSFlags
	RunFlags
	ProcessorFlags
}

// config is the processor's configuration of the flags.
func (c *ProcessorCmd) config() (server.Config, error) {
	cfg, err := c.RunFlags.config(server.Roles{Processor: true})
	c.ProcessorFlags.apply(&cfg)
	return cfg, err
}

// Run runs the processor.
func (c *ProcessorCmd) Run(g *globals) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	return runRole(g, c.NATSFlags, cfg, c.MemoryLimit, "", c.MetricsTokenFile)
}

// ProjectorCmd is orderly projector: the optional projector alone.
type ProjectorCmd struct {
	NATSFlags
	RunFlags
	ProjectorFlags
}

// Run runs the projector.
func (c *ProjectorCmd) Run(g *globals) error {
	cfg, err := c.RunFlags.config(server.Roles{Projector: true})
	if err != nil {
		return err
	}
	c.ProjectorFlags.apply(&cfg)
	return runRole(g, c.NATSFlags, cfg, c.MemoryLimit, "", c.MetricsTokenFile)
}

// runRole runs one role against the NATS that n names.
func runRole(g *globals, n NATSFlags, cfg server.Config, memoryLimit, tokensFile, metricsTokenFile string) error {
	if n.NATSURL == "" {
		return errors.New("--nats-url is required: the separate roles run against a NATS (cluster); use 'orderly serve' for one process with an embedded server")
	}
	n.apply(&cfg)
	return runServer(g, cfg, memoryLimit, tokensFile, metricsTokenFile)
}

func (n NATSFlags) apply(cfg *server.Config) {
	cfg.NATSURL = n.NATSURL
	cfg.Credentials = n.credentials()
	cfg.App.RequestTimeout = n.NATSTimeout
	cfg.StartupTimeout = n.StartupTimeout
}

func (c *RunFlags) config(roles server.Roles) (server.Config, error) {
	cfg := server.DefaultConfig()
	cfg.Roles = roles
	cfg.HTTPAddr = c.HTTPAddr
	cfg.PprofAddr = c.PprofAddr
	cfg.Tracing.Endpoint, cfg.Tracing.SampleRatio = c.OTLPEndpoint, c.TraceRatio
	cfg.BatchWrites = c.BatchWrites == "on"
	if c.MetricsTokenFile != "" {
		token, err := readMetricsToken(c.MetricsTokenFile)
		if err != nil {
			return cfg, err
		}
		cfg.Ops.MetricsToken = token
	}
	return cfg, nil
}

// readMetricsToken reads the one token of --metrics-token-file.
func readMetricsToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	fields := strings.Fields(string(bytes.TrimPrefix(b, []byte(byteOrderMark)))) // as in the tokens file
	switch {
	case len(fields) != 1:
		return "", fmt.Errorf("--metrics-token-file %s: want one token, found %d words", path, len(fields))
	case len(fields[0]) < MinTokenLength:
		return "", fmt.Errorf("--metrics-token-file %s: the token has %d characters, fewer than %d, and could be guessed: use a random one, such as the output of openssl rand -hex 24", path, len(fields[0]), MinTokenLength)
	}
	return fields[0], nil
}

func (c *APIFlags) apply(cfg *server.Config) error {
	cfg.API.Wait = c.Wait
	cfg.API.MaxWait = c.MaxWait
	// A size, not a count with a default for 0: --body-limit=0 was taken
	// as the 64 KiB default without a word.
	bodyLimit, err := parseLimit("--body-limit", c.BodyLimit, "64KiB")
	if err != nil {
		return err
	}
	headerBytes, err := parseLimit("--http-max-header-bytes", c.MaxHeaderBytes, "32KiB")
	if err != nil {
		return err
	}
	cfg.API.BodyLimit = bodyLimit
	cfg.HTTP = server.HTTPLimits{HeaderTimeout: c.HeaderTimeout, BodyTimeout: c.BodyTimeout, IdleTimeout: c.IdleTimeout, MaxHeaderBytes: int(headerBytes), MaxConns: c.MaxConns}
	cfg.Hub.CacheSize = c.ResultCache
	cfg.OrderIDs = c.OrderIDs
	cfg.HTTPAnonymous = c.HTTPAnonymous
	if c.TokensFile != "" {
		tokens, err := readTokens(c.TokensFile)
		if err != nil {
			return err
		}
		cfg.API.Tokens = tokens
	}
	return nil
}

func (c *ProcessorFlags) apply(cfg *server.Config) { cfg.Processor.Concurrency = c.Concurrency }

func (c *ProjectorFlags) apply(cfg *server.Config) { cfg.Projector.Concurrency = c.ProjConcurrency }

// runServer runs a server until it is stopped or fails. SIGHUP reads
// tokensFile again and gives the API its tokens, and metricsTokenFile and
// gives /metrics its token; a process without either logs that it has
// nothing to reload, and goes on.
func runServer(g *globals, cfg server.Config, memoryLimit, tokensFile, metricsTokenFile string) error {
	// Refused before anything is logged or applied: a mistyped flag's
	// error is all the output.
	if err := server.CheckConfig(cfg); err != nil {
		return err
	}
	share := 1.0
	child := cfg.NATSURL == "" && cfg.NATSProcess == natsserver.Child
	if child {
		share = childShare
	}
	limit, from, err := applyMemoryLimit(memoryLimit, share, memlimit.FromCgroup, g.ctx, g.logger)
	if err != nil {
		return err
	}
	cfg.Version, cfg.Commit = buildVersion()
	attrs := []any{"version", cfg.Version, "commit", cfg.Commit, "memory_limit", humanLimit(limit)}
	if child {
		// The two processes share the container: the server's child takes
		// the rest of the limit.
		cfg.NATSMemoryLimit = childMemoryLimit(limit)
		attrs = append(attrs, "nats_memory_limit", humanLimit(cfg.NATSMemoryLimit))
	}
	g.logger.Info("orderly starting", append(attrs, "memory_limit_from", from)...)
	if w := tokensFileWarning(tokensFile); w != "" {
		g.logger.Warn(w, "file", tokensFile)
	}
	// From here on SIGHUP never stops the process; one during the start is
	// acted on once it has started.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s, err := server.Start(g.ctx, cfg, g.logger)
	if err != nil {
		return err
	}
	// Give back what a burst grew the heap to once it is over (a child
	// process's embedded server does the same in its process).
	release := ops.DefaultIdleRelease
	if cfg.NATSURL == "" && cfg.NATSProcess == natsserver.InProcess {
		// The embedded server's duplicate window frees its entries as
		// they expire, without allocating: release once more after it.
		release = release.WithWindow(cfg.Topology.DedupWindow)
	}
	go release.Run(g.ctx, g.logger)
	var failure error
wait:
	for {
		select {
		case <-g.ctx.Done():
			g.logger.Info("shutting down; a second SIGINT or SIGTERM stops the process at once")
			break wait
		case failure = <-s.Failed():
			g.logger.Error("a component stopped; shutting down", "err", failure)
			break wait
		case <-hup:
			renewed := renewNATSTLS(g.logger, s)
			if tokensFile == "" && metricsTokenFile == "" && !renewed {
				g.logger.Info("SIGHUP: nothing to reload (no --tokens-file, no --metrics-token-file, no TLS of an embedded NATS server)")
			}
			reloadTokens(g.logger, s, tokensFile)
			reloadMetricsToken(g.logger, s, metricsTokenFile)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		return errors.Join(failure, err)
	}
	g.logger.Info("stopped")
	return failure
}

// renewNATSTLS issues the embedded NATS server's certificate again when it
// is due, and says what it did; false without an embedded server with TLS.
func renewNATSTLS(logger *slog.Logger, s *server.Server) bool {
	issued, ok, err := s.RenewNATSTLS()
	switch {
	case !ok:
	case err != nil:
		logger.Error("SIGHUP: the embedded NATS server's certificate was not renewed; it keeps the one it has", "err", err)
	case issued.CA:
		logger.Warn("SIGHUP: the embedded NATS server has a new CA (the one before was gone) and a certificate it signed: clients on other hosts need the new CA",
			"ca", s.NATSCA(), "hosts", strings.Join(issued.Hosts, ","), "expires", issued.Expires.Format(time.DateOnly))
	case issued.Node:
		logger.Info("SIGHUP: the embedded NATS server's certificate was issued again; clients that connect from now on get it",
			"why", issued.Reason, "hosts", strings.Join(issued.Hosts, ","), "expires", issued.Expires.Format(time.DateOnly))
	default:
		logger.Info("SIGHUP: the embedded NATS server's certificate is not due for renewal", "expires", issued.Expires.Format(time.DateOnly))
	}
	return ok
}

// reloadTokens reads path again and replaces the API's tokens with what it
// holds. A file that cannot be read or holds no valid set changes nothing.
func reloadTokens(logger *slog.Logger, s *server.Server, path string) {
	if path == "" {
		return
	}
	c, err := s.ReloadTokens(func() (map[string]string, error) { return readTokens(path) })
	if err != nil {
		logger.Error("SIGHUP: tokens file not reloaded; the API keeps the tokens it had", "file", path, "err", err)
		return
	}
	logger.Info("SIGHUP: tokens file reloaded", "file", path, "tokens", c.Tokens, "tenants", c.Tenants,
		"added", len(c.Added), "removed", len(c.Removed), "moved_to_another_tenant", len(c.Moved),
		"added_ids", strings.Join(c.Added, ","), "removed_ids", strings.Join(c.Removed, ","), "moved_ids", strings.Join(c.Moved, ","))
	if w := tokensFileWarning(path); w != "" {
		logger.Warn(w, "file", path)
	}
}

// reloadMetricsToken reads the metrics token file at path again, if any. A
// file that cannot be read or holds no valid token changes nothing.
func reloadMetricsToken(logger *slog.Logger, s *server.Server, path string) {
	if path == "" {
		return
	}
	token, err := readMetricsToken(path)
	if err == nil {
		err = s.SetMetricsToken(token)
	}
	if err != nil {
		logger.Error("SIGHUP: metrics token file not reloaded; /metrics keeps the token it had", "file", path, "err", err)
		return
	}
	logger.Info("SIGHUP: metrics token file reloaded", "file", path)
}

// tokensFileWarning says what is wrong with the tokens file at path that
// does not stop it from being used: every user of the machine can read it,
// and so every client's token. Group read is left alone: a container's
// process often reads its secrets through its group.
func tokensFileWarning(path string) string {
	if path == "" {
		return ""
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o004 == 0 {
		return ""
	}
	return fmt.Sprintf("the tokens file is readable by every user of this machine (mode %v), and with it every client's token: chmod 600 it (or 640 for a group that runs orderly)", st.Mode().Perm())
}

// errNoTokens is readTokens' error for a file without a token.
var errNoTokens = errors.New("holds no tokens")

// MinTokenLength is the fewest characters a token of --tokens-file may have.
const MinTokenLength = 16

// tenantOfTokensFile reports whether a tokens file can name tenant (see
// readTokens): one word, not a comment.
func tenantOfTokensFile(tenant string) bool {
	f := strings.Fields(tenant)
	return len(f) == 1 && f[0] == tenant && !strings.HasPrefix(tenant, "#")
}

// readTokens reads 'tenant token' lines; blank lines and # comments are skipped.
func readTokens(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	return parseTokens(path, b)
}

// byteOrderMark starts some files written on Windows; it is not part of
// their first word.
const byteOrderMark = "\ufeff"

// maxTenantLen bounds a tenant's name in bytes: it is stored with every
// command and event of the tenant's orders.
const maxTenantLen = 128

// printableTenant reports whether a tokens file's tenant is valid UTF-8 of
// printable characters only (no control or invisible format characters),
// at most maxTenantLen bytes. It is not as strict as tokens add, which
// tenants of existing files may not meet.
func printableTenant(t string) bool {
	if len(t) > maxTenantLen || !utf8.ValidString(t) {
		return false
	}
	for _, r := range t {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// parseTokens parses the tokens file read from path (named in errors) into
// the APIs' map of token to tenant.
func parseTokens(path string, b []byte) (map[string]string, error) {
	lines, err := parseTokenLines(path, b)
	if err != nil {
		return nil, err
	}
	tokens := make(map[string]string, len(lines))
	for _, l := range lines {
		tokens[l.token] = l.Tenant
	}
	return tokens, nil
}

// parseTokenLines parses the tokens file read from path (named in errors)
// into its tokens, in the order of its lines; a file without one is
// errNoTokens.
func parseTokenLines(path string, b []byte) ([]tokenLine, error) {
	var lines []tokenLine
	tenantOf := make(map[string]string)
	// A byte order mark, which editors on Windows write, made the first
	// tenant another one ("\ufefft1"), whose keys keys get --tenant t1
	// did not find.
	b = bytes.TrimPrefix(b, []byte(byteOrderMark))
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("tokens file %s line %d: want 'tenant token'", path, n+1)
		}
		if !printableTenant(fields[0]) {
			return nil, fmt.Errorf("tokens file %s line %d: tenant %q: use up to %d printable characters (orderly tokens add takes letters, digits, '.', '_' and '-')", path, n+1, fields[0], maxTenantLen)
		}
		if len(fields[1]) < MinTokenLength {
			return nil, fmt.Errorf("tokens file %s line %d: the token of tenant %s has %d characters, fewer than %d, and could be guessed: use a random one (orderly tokens add %s --tokens-file %s adds one)", path, n+1, fields[0], len(fields[1]), MinTokenLength, fields[0], path)
		}
		if prev, dup := tenantOf[fields[1]]; dup {
			return nil, fmt.Errorf("tokens file %s line %d: token already used by tenant %s", path, n+1, prev)
		}
		tenantOf[fields[1]] = fields[0]
		lines = append(lines, tokenLine{Tenant: fields[0], ID: api.TokenID(fields[1]), Line: n + 1, token: fields[1]})
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("tokens file %s %w", path, errNoTokens)
	}
	return lines, nil
}

// parseBytes parses a size such as 512MiB, 1GiB, 400MB or 1048576.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000}, {"B", 1}}
	mult := int64(1)
	num := strings.TrimSpace(s)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("want a size such as 512MiB, got %q", s)
	}
	return n * mult, nil
}

// parseLimit is parseBytes for the size flag named flag, which has no "none":
// 0 is refused like any size that is not one. example is a size that fits
// the flag. The result fits in an int.
func parseLimit(flag, s, example string) (int64, error) {
	n, err := parseBytes(s)
	if err != nil || n > math.MaxInt32 {
		return 0, fmt.Errorf("%s: want a size such as %s, or a number of bytes (at most 2GiB), got %q", flag, example, s)
	}
	return n, nil
}

// parseSize is parseBytes for the size flag named flag, where 0 means none.
func parseSize(flag, s string) (int64, error) {
	if strings.TrimSpace(s) == "0" {
		return 0, nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", flag, err)
	}
	return n, nil
}
