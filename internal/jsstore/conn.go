package jsstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConnectConfig says how to reach NATS and who to be there.
type ConnectConfig struct {
	// URL lists the servers, comma-separated.
	URL string
	// Name names the connection (shown by the server as orderly-<name>).
	Name string
	// Credentials authenticate the connection; zero connects anonymously
	// (only an open NATS admits that).
	Credentials Credentials
	// InboxPrefix is where replies arrive (the user's permissions allow it);
	// empty is nats.go's _INBOX.
	InboxPrefix string
	// OnClosed, when set, is called when the connection is closed for good:
	// by Close or Drain, or because nats.go gave up (on a protocol error, say,
	// it closes instead of reconnecting). err is the last error.
	OnClosed func(err error)
	// DrainTimeout bounds how long a drain waits for the subscriptions to
	// finish what they hold before it flushes the publishes and closes
	// anyway (default 10s; nats.go's own is 30s, longer than what a
	// shutdown has left by then).
	DrainTimeout time.Duration
}

// Credentials are one of: an nkey seed file (NkeyFile), a .creds file with a
// JWT and its seed (CredsFile), or a user name and password.
type Credentials struct {
	NkeyFile  string
	CredsFile string
	User      string
	Password  string
	// InboxPrefix is where the user may receive replies; empty is nats.go's
	// _INBOX (ConnectConfig.InboxPrefix, when set, wins).
	InboxPrefix string
	// CAFile, when set, is a PEM file of the certificate authorities that
	// signed the servers' TLS certificates. The connection then requires
	// TLS, whatever the URL's scheme, and trusts those authorities only,
	// not the system's. The file is read again at every (re)connect, so a
	// renewed bundle is taken without a restart.
	CAFile string
	// CAIfAsked makes CAFile count only when a server asks for TLS: the
	// connection takes a server without TLS too. For the tools' fallback to
	// a local orderly serve, whose embedded server may or may not have TLS.
	CAIfAsked bool
	// CertFile and KeyFile, when set (both), are the client certificate and
	// its key that the connection presents to servers that ask for one
	// (tls { verify: true }); read again at every (re)connect too.
	CertFile, KeyFile string
	// JSDomain is the JetStream domain that holds orderly's streams, when it
	// is not the one of the server connected to: a leaf node with a
	// JetStream of its own reaches its hub's as $JS.<domain>.API. Empty:
	// the connected server's JetStream.
	JSDomain string
}

// options are the nats.go options of c, or an error when more than one kind
// is given or a file cannot be used.
func (c Credentials) options() ([]nats.Option, error) {
	kinds := 0
	var opts []nats.Option
	if c.NkeyFile != "" {
		kinds++
		o, err := nats.NkeyOptionFromSeed(c.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed %s: %w", c.NkeyFile, err)
		}
		opts = append(opts, o)
	}
	if c.CredsFile != "" {
		kinds++
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.User != "" || c.Password != "" {
		kinds++
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if kinds > 1 {
		return nil, errors.New("give one kind of NATS credentials: an nkey seed, a .creds file, or a user and password")
	}
	if err := ValidDomain(c.JSDomain); err != nil {
		return nil, err
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if c.CAFile != "" {
		// Applied once here, so that a missing or unparsable file fails
		// now, naming the flag; nats.go reads it again at each connect.
		ca := nats.RootCAs(c.CAFile)
		if err := ca(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("--nats-ca %s: no PEM certificate could be read from it (%w)", c.CAFile, err)
		}
		opts = append(opts, ca)
		if c.CAIfAsked {
			// RootCAs asks for TLS; nats.go still switches to it, with
			// these CAs, when the server's INFO requires it.
			opts = append(opts, func(o *nats.Options) error { o.Secure = false; return nil })
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("give --nats-cert and --nats-key together: a client certificate and its key")
	}
	if c.CertFile != "" {
		cert := nats.ClientCert(c.CertFile, c.KeyFile)
		if err := cert(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("--nats-cert %s, --nats-key %s: %w", c.CertFile, c.KeyFile, err)
		}
		opts = append(opts, cert)
	}
	return opts, nil
}

// Authenticated tells whether c names a user to connect as (not only a CA
// or an inbox prefix).
func (c Credentials) Authenticated() bool {
	return c.NkeyFile != "" || c.CredsFile != "" || c.User != "" || c.Password != ""
}

// ErrTLS says that a connection's TLS cannot work as configured: the
// server's certificate is not trusted, the server refuses the client's
// certificate (or its lack of one), or TLS is asked for and the server does
// not offer it. Waiting does not help, so Connect returns it when no
// server has taken the connection within tlsPatience of the first.
var ErrTLS = errors.New("NATS TLS")

// clientCertAlerts are the TLS alerts a server sends about the client's
// certificate, as crypto/tls reports them (a *net.OpError "remote error"
// whose error is the alert, of a type it does not export): bad_certificate,
// unsupported_certificate, certificate_revoked, certificate_expired,
// certificate_unknown, unknown_ca, certificate_required.
var clientCertAlerts = map[string]bool{
	"tls: bad certificate": true, "tls: unsupported certificate": true, "tls: revoked certificate": true,
	"tls: expired certificate": true, "tls: unknown certificate": true, "tls: unknown certificate authority": true,
	"tls: certificate required": true,
}

// tlsPatience is how long Connect goes on trying after a TLS refusal:
// several rounds of the servers at the reconnect wait of 250 ms.
const tlsPatience = 2 * time.Second

// tlsRefusal is a permanent TLS failure of a connection as an error that
// says what to do, or nil when err is not one.
func tlsRefusal(err error, caFile string) error {
	var verify *tls.CertificateVerificationError
	var remote *net.OpError
	switch {
	case errors.As(err, &remote) && remote.Op == "remote error" && remote.Err != nil && clientCertAlerts[remote.Err.Error()]:
		return fmt.Errorf("%w: the server refused this client's certificate, or asks for one (%v): give one that the server's CA signed with --nats-cert and --nats-key", ErrTLS, err)
	case errors.Is(err, nats.ErrTLS) && strings.Contains(err.Error(), "closed by remote after TLS handshake"):
		// How a refused client certificate looks when the server's alert
		// is not read before it closes the connection (nats.go's
		// tlsHandshakeEOF).
		return fmt.Errorf("%w: the server closed the connection right after the TLS handshake, as it does when it refuses this client's certificate or asks for one (%v): give one that the server's CA signed with --nats-cert and --nats-key", ErrTLS, err)
	case errors.As(err, &verify) && caFile != "":
		return fmt.Errorf("%w: the server's certificate does not verify against the CAs of --nats-ca %s (%v)", ErrTLS, caFile, verify.Err)
	case errors.As(err, &verify):
		return fmt.Errorf("%w: the server's certificate is not trusted (%v): give the CA that signed it with --nats-ca", ErrTLS, verify.Err)
	case errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Errorf("%w: TLS is asked for (--nats-ca, or a tls:// URL), and the server does not offer it (configure tls {} on the server, or leave both out on a network you trust)", ErrTLS)
	}
	return nil
}

// Redact removes passwords and tokens from a comma-separated list of NATS
// URLs, for logs and errors.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if strings.Contains(p, "@") { // unparsable, but it may hold a secret
				parts[i] = "[redacted]" + p[strings.LastIndexByte(p, '@'):]
			}
			continue
		}
		if _, ok := u.User.Password(); ok {
			parts[i] = u.Redacted()
		} else { // a token or a user name alone: hide it too
			u.User = url.User("xxxxx")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// pingInterval is how often a process's connection asks its server for a
// sign of life (a PING, answered with a PONG).
const pingInterval = 5 * time.Second

// Connect opens a connection. It reconnects for ever; when the servers cannot
// be reached at first it keeps trying until ctx ends.
func Connect(ctx context.Context, cfg ConnectConfig, logger *slog.Logger) (*nats.Conn, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("component", "nats", "conn", cfg.Name)
	auth, err := cfg.Credentials.options()
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name("orderly-" + cfg.Name),
		nats.DrainTimeout(cmp.Or(cfg.DrainTimeout, 10*time.Second)),
		nats.MaxReconnects(-1),
		// A server that stops answering without closing the connection (its
		// host lost power, or the network to it drops every byte) is left
		// after three pings without an answer, 10 to 15 s, instead of nats.go's
		// 4 to 6 minutes (pings 2 minutes apart). The server's watch of its
		// node (internal/server, ADR 0027) leaves one sooner, after 5 s; this
		// is the line behind it.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(2),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, 100*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// Pending publishes while disconnected are bounded by their own deadlines;
		// do not hold megabytes of them in memory.
		nats.ReconnectBufSize(1 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "url", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("NATS async error", "subject", subj, "err", err)
		}),
		nats.ClosedHandler(func(c *nats.Conn) {
			if cfg.OnClosed != nil {
				err := c.LastError()
				if err == nil {
					err = errors.New("closed")
				}
				cfg.OnClosed(err)
			}
		}),
	}
	opts = append(opts, auth...)
	if cfg.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	url := cfg.URL
	if url == "" {
		return nil, errors.New("no NATS URL")
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", Redact(url), err)
	}
	start, said := time.Now(), time.Now()
	var refused time.Time // when a try first met a TLS refusal
	var refusal error     // the last one
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			last := nc.LastError()
			nc.Close()
			if last != nil {
				return nil, fmt.Errorf("connect to NATS %s: %w (last error: %v)", Redact(url), ctx.Err(), last)
			}
			return nil, fmt.Errorf("connect to NATS %s: %w", Redact(url), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if last := nc.LastError(); IsAuthError(last) {
			nc.Close()
			return nil, cfg.Credentials.refused(url, last)
		} else if err := tlsRefusal(last, cfg.Credentials.CAFile); err != nil {
			if refusal == nil {
				refused = time.Now()
			}
			refusal = err
		}
		// Not at the first refusal: nats.go tries every server of the URL
		// list in turn, and one node with a bad certificate must not stop a
		// process that another node would take. The refusal is remembered:
		// a server that refuses a client's certificate closes the
		// connection, and the next tries may read only that.
		if refusal != nil && time.Since(refused) >= tlsPatience {
			nc.Close()
			return nil, fmt.Errorf("connect to NATS %s: %w", Redact(url), refusal)
		}
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			log.Warn("waiting for NATS", "url", Redact(url), "waited", time.Since(start).Round(time.Second), "last_error", nc.LastError())
		}
	}
	return nc, nil
}

// ErrCredentials says that NATS refused who orderly connected as: no
// credentials, unknown ones, or a user without the rights to connect. Waiting
// does not help, so Connect returns it at once, with what to pass instead.
var ErrCredentials = errors.New("the server refused the credentials")

// refused is the error of a connection to url that NATS refused (err) for
// c: what to pass, for the kind of credentials given. A user and password
// was told to pass an nkey seed.
func (c Credentials) refused(url string, err error) error {
	var hint string
	switch {
	case c.User != "" || c.Password != "":
		hint = fmt.Sprintf("the server knows no user %q with that password: check --nats-user and --nats-password (or ORDERLY_NATS_PASSWORD)", c.User)
	case c.CredsFile != "":
		hint = fmt.Sprintf("the server does not take the JWT of %s (--nats-creds): a user of an account it trusts, not expired or revoked", c.CredsFile)
	case c.NkeyFile != "":
		hint = fmt.Sprintf("the server does not know the key of %s (--nats-nkey): give the seed of the role's user (orderly serve and orderly credentials init write one per user), and load the accounts file of the same credentials into every NATS node", c.NkeyFile)
	default:
		hint = "pass the user's nkey seed with --nats-nkey (orderly serve and orderly credentials init write one per user), a .creds file with --nats-creds, or --nats-user and --nats-password"
	}
	return fmt.Errorf("connect to NATS %s: %w (%v): %s", Redact(url), ErrCredentials, err, hint)
}

// IsAuthError tells whether err is NATS refusing a connection's credentials.
func IsAuthError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return true
	}
	return strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// Dial connects a tool to NATS at once or fails: no retries, no reconnect
// waits at start (Connect is for the long-lived processes).
func Dial(url string, creds Credentials, name string) (*nats.Conn, error) {
	auth, err := creds.options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name(name), nats.Timeout(5 * time.Second), nats.ErrorHandler(toolAsyncError)}, auth...)...)
	if IsAuthError(err) {
		return nil, creds.refused(url, err)
	}
	if refusal := tlsRefusal(err, creds.CAFile); refusal != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", Redact(url), refusal)
	}
	if errors.Is(err, nats.ErrNoServers) {
		return nil, fmt.Errorf("connect to NATS %s: %w: nothing answers there; start orderly serve (its embedded server listens on 127.0.0.1:4222 unless --nats-listen says otherwise), or point --nats-url at orderly's NATS", Redact(url), err)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", Redact(url), err)
	}
	return nc, nil
}

// toolAsyncError writes an error NATS reports on a tool's connection to
// stderr, except a permissions violation: the request it refused times out,
// and the tool's error names the violation (WithDenied), once. (nats.go's
// default handler writes each one, as "... on connection [N]".)
func toolAsyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	if sub != nil {
		fmt.Fprintf(os.Stderr, "orderly: NATS: %v (subscription on %s)\n", err, sub.Subject)
		return
	}
	fmt.Fprintf(os.Stderr, "orderly: NATS: %v\n", err)
}

// DialJetStream is Dial and a JetStream context on the connection; close it
// with js.Conn().Close().
func DialJetStream(url string, creds Credentials, name string) (jetstream.JetStream, error) {
	nc, err := Dial(url, creds, name)
	if err != nil {
		return nil, err
	}
	js, err := JetStreamIn(nc, creds.JSDomain)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return js, nil
}

// JetStreamIn is a JetStream context on nc for the JetStream of domain, or
// of the server nc is connected to when domain is empty.
func JetStreamIn(nc *nats.Conn, domain string, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	if domain == "" {
		return jetstream.New(nc, opts...)
	}
	return jetstream.NewWithDomain(nc, domain, opts...)
}

// ValidDomain says why domain cannot name a JetStream domain, or nil: it
// becomes a token of the API's subjects ($JS.<domain>.API.>), so it may not
// hold '.', '*', '>', white space or control characters (nats-server
// refuses such a domain too).
func ValidDomain(domain string) error {
	if domain == "" {
		return nil
	}
	if len(domain) > 64 {
		return fmt.Errorf("--nats-js-domain: a domain of %d bytes; at most 64", len(domain))
	}
	for _, r := range domain {
		if r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f || r == utf8.RuneError {
			return fmt.Errorf("--nats-js-domain %q: a domain is one token of a NATS subject: no '.', '*', '>', spaces or control characters", domain)
		}
	}
	return nil
}

// Drain drains nc (its subscriptions finish what they hold, at most the
// connection's DrainTimeout, then its publishes are flushed) and waits until
// it is closed, or closes it when ctx ends first. The connection's own
// closed handler (ConnectConfig.OnClosed) is still called.
func Drain(ctx context.Context, nc *nats.Conn) error {
	if nc.IsClosed() {
		return nil
	}
	closed := make(chan struct{})
	var once sync.Once
	prev := nc.ClosedHandler()
	nc.SetClosedHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		once.Do(func() { close(closed) })
	})
	if err := nc.Drain(); err != nil || nc.IsClosed() {
		nc.Close()
		return nil
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		subs := nc.NumSubscriptions()
		nc.Close()
		return fmt.Errorf("drain %s: %w (%d subscriptions not drained)", nc.Opts.Name, ctx.Err(), subs)
	}
}
