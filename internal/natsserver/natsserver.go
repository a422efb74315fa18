// Package natsserver runs nats-server inside orderly: the embedded server of
// `orderly serve`, one node or a cluster node, with its durability mode.
//
// Only `orderly serve` and the tests link nats-server: nothing else may import
// this package. Clients of NATS (everything else) use internal/jsstore.
package natsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Fsync says when the embedded server flushes JetStream writes to disk.
type Fsync struct {
	// Always syncs every write before it is acknowledged (survives power loss).
	Always bool
	// Interval is the period of the background sync when Always is false. A
	// process crash loses nothing (the page cache survives); power loss or an OS
	// crash loses up to Interval of acknowledged writes.
	Interval time.Duration
	// Group: the server syncs every Interval (GroupInterval) in the
	// background, and orderly answers a client only after a sync of its own
	// that started after the answer was known (internal/durable: one group
	// commit for all concurrent answers). What a client was told survives
	// power loss; an event consumer may still see an event that power loss
	// takes back, as with an interval.
	Group bool
}

// GroupInterval is the server's background sync with Group.
const GroupInterval = time.Second

// ParseFsync parses "always", "group" or a Go duration such as "1s" or "2m".
func ParseFsync(s string) (Fsync, error) {
	if strings.EqualFold(strings.TrimSpace(s), "always") {
		return Fsync{Always: true}, nil
	}
	if strings.EqualFold(strings.TrimSpace(s), "group") {
		return Fsync{Group: true, Interval: GroupInterval}, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d <= 0 {
		return Fsync{}, fmt.Errorf("fsync must be \"always\", \"group\" or a positive duration such as 1s, got %q", s)
	}
	return Fsync{Interval: d}, nil
}

// String is the flag form of f.
func (f Fsync) String() string {
	if f.Always {
		return "always"
	}
	if f.Group {
		return "group"
	}
	return f.Interval.String()
}

// ClusterConfig makes the embedded server one node of a NATS cluster.
type ClusterConfig struct {
	// Name is the cluster name; every node uses the same.
	Name string
	// Listen is host:port for routes from the other nodes.
	Listen string
	// Routes are the other nodes' route URLs, such as nats://127.0.0.1:6222.
	Routes []string
}

// Config configures an embedded nats-server.
type Config struct {
	// ServerName names the node; required and unique in a cluster.
	ServerName string
	// StoreDir is where JetStream keeps its files.
	StoreDir string
	// Listen is the host:port of the client port. Empty: no port at all, in-process
	// connections only. Port -1 picks a free port.
	Listen string
	// Fsync is the durability mode.
	Fsync Fsync
	// Cluster, when set, joins a cluster.
	Cluster *ClusterConfig
	// Logger receives the server's log; nil silences it.
	Logger *slog.Logger `json:"-"`
	// MaxStore bounds JetStream's file storage, in bytes. 0 leaves nats-server's
	// default: 75% of the free space of StoreDir's file system when the server
	// starts, fixed until it restarts (so a disk that grows does not help, and
	// one that shrinks is not seen).
	MaxStore int64
	// Accounts, when set, is a configuration file with the accounts, users and
	// permissions (internal/natsauth writes it). Without it the server admits
	// anyone: only tests do that.
	Accounts string
	// Probe are the client options (credentials) of the connection that waits
	// for JetStream at start; needed with Accounts.
	Probe []nats.Option `json:"-"`
	// MemoryLimit is the soft limit of the Go heap of a server in a child
	// process (StartChild); 0: the same as this process's (--memory-limit,
	// GOMEMLIMIT), which is nats-server's heap in process.
	MemoryLimit int64
	// PprofAddr, when set, serves a child process's Go profiles there
	// (net/http/pprof, no authentication: loopback). In process, the
	// program's own profiles include the server.
	PprofAddr string
	// DedupWindow is the longest duplicate window of the server's streams:
	// a child process returns its free heap to the operating system once
	// after a burst and once more when the window's entries have expired
	// (ops.IdleRelease). In process, the program does that.
	DedupWindow time.Duration
	// OnError, when set, is called with every error the server logs (for
	// example "Filestore [ORDER_EVENTS] Critical write error: ...").
	OnError func(msg string) `json:"-"`
	// TLSCert and TLSKey, when set (both), are the PEM certificate and key
	// of the client port, which then requires TLS of every TCP client.
	// Connections in the server's process (nats.InProcessServer, the
	// readiness probe) are exempt: nats-server lets them choose.
	TLSCert string
	TLSKey  string
}

// Validate reports every problem with the config.
func (c Config) Validate() error {
	var errs []error
	if c.StoreDir == "" {
		errs = append(errs, errors.New("embedded NATS: store directory is empty"))
	}
	if c.ServerName == "" {
		errs = append(errs, errors.New("embedded NATS: server name is empty"))
	}
	if !c.Fsync.Always && c.Fsync.Interval <= 0 {
		errs = append(errs, errors.New("embedded NATS: fsync interval must be positive"))
	}
	if c.Listen != "" {
		if _, _, err := splitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("embedded NATS: listen address (--nats-listen): %w", err))
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("embedded NATS: TLS needs both a certificate and its key"))
	}
	if c.Cluster != nil {
		if c.Cluster.Name == "" {
			errs = append(errs, errors.New("embedded NATS: cluster name is empty"))
		}
		if _, _, err := splitHostPort(c.Cluster.Listen); err != nil {
			errs = append(errs, fmt.Errorf("embedded NATS: cluster listen address: %w", err))
		}
	}
	return errors.Join(errs...)
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// CheckListen fails when the client address listen (host:port; empty or a
// random port: nothing to check) cannot be listened on now, naming
// --nats-listen.
func CheckListen(listen string) error {
	if _, port, _ := splitHostPort(listen); listen == "" || port <= 0 {
		return nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("embedded NATS: cannot listen on %s (another orderly or NATS? set --nats-listen): %w", listen, err)
	}
	return ln.Close()
}

// StartEmbedded starts a nats-server with JetStream and waits until it accepts
// connections and JetStream answers (in a cluster: until there is a meta leader).
func Start(ctx context.Context, cfg Config) (*server.Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Fail at once, not after the readiness timeout, when the port is taken.
	if err := CheckListen(cfg.Listen); err != nil {
		return nil, err
	}
	opts, err := Options(cfg)
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if cfg.Logger != nil || cfg.OnError != nil {
		l := cfg.Logger
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		ns.SetLoggerV2(slogAdapter{l: l.With("component", "nats-server"), onError: cfg.OnError}, false, false, false)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded NATS: not ready for connections after 30s")
	}
	if err := waitJetStream(ctx, ns, cfg.Probe); err != nil {
		ns.Shutdown()
		return nil, err
	}
	return ns, nil
}

// Options are the nats-server options of cfg.
func Options(cfg Config) (*server.Options, error) {
	opts := &server.Options{}
	if cfg.Accounts != "" {
		if err := opts.ProcessConfigFile(cfg.Accounts); err != nil {
			return nil, fmt.Errorf("embedded NATS: accounts: %w", err)
		}
	}
	opts.ServerName = cfg.ServerName
	opts.JetStream = true
	opts.StoreDir = cfg.StoreDir
	opts.SyncAlways = cfg.Fsync.Always
	opts.SyncInterval = cfg.Fsync.Interval
	opts.NoSigs = true
	opts.JetStreamMaxStore = cfg.MaxStore
	// The server's own limit on pending bytes per client is generous; a slow
	// in-process client must not be cut off under load.
	opts.MaxPending = 256 << 20
	if cfg.Fsync.Always {
		opts.SyncInterval = 2 * time.Minute // ignored by the store when SyncAlways is set
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, _ := splitHostPort(cfg.Listen)
		opts.Host, opts.Port = host, port
	}
	if cfg.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("embedded NATS: TLS: %w", err)
		}
		// The files are read again when they change, so that a certificate
		// issued again while the server runs is presented to the next
		// client without a reload.
		files := &certFiles{cert: cfg.TLSCert, key: cfg.TLSKey}
		if _, err := files.get(nil); err != nil {
			return nil, fmt.Errorf("embedded NATS: TLS: %w", err)
		}
		tc.Certificates, tc.GetCertificate = nil, files.get
		opts.TLSConfig, opts.TLS = tc, true
	}
	if c := cfg.Cluster; c != nil {
		host, port, _ := splitHostPort(c.Listen)
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port}
		for _, r := range c.Routes {
			urls := server.RoutesFromStr(r)
			if len(urls) == 0 {
				return nil, fmt.Errorf("embedded NATS: bad route %q", r)
			}
			opts.Routes = append(opts.Routes, urls...)
		}
	}
	return opts, nil
}

// waitJetStream polls AccountInfo until JetStream answers: ReadyForConnections does
// not wait for a cluster's meta leader.
func waitJetStream(ctx context.Context, ns *server.Server, probe []nats.Option) error {
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(ns)}, probe...)...)
	if err != nil {
		return fmt.Errorf("embedded NATS: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedded NATS: JetStream not ready: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type slogAdapter struct {
	l       *slog.Logger
	onError func(string)
}

// Noticef logs at debug: the server's notices (banner, start-up, shutdown) are
// noise in orderly's log; its warnings and errors are not.
func (a slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  {}

func (a slogAdapter) error(msg string) {
	a.l.Error(msg)
	if a.onError != nil {
		a.onError(msg)
	}
}

// certFiles is a server certificate read from its files, and read again
// at a handshake after either file changed (its size or modification time).
// A pair that cannot be loaded leaves the one before in use.
type certFiles struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]fileStamp
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var stamp [2]fileStamp
	for i, path := range []string{f.cert, f.key} {
		if st, err := os.Stat(path); err == nil {
			stamp[i] = fileStamp{st.Size(), st.ModTime()}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != nil && stamp == f.stamp {
		return f.current, nil
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		if f.current != nil {
			return f.current, nil // half written, or a key not yet beside its certificate
		}
		return nil, err
	}
	f.current, f.stamp = &pair, stamp
	return f.current, nil
}
