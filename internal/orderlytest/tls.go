package orderlytest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/natsserver"
)

// TLSFiles are PEM files of a certificate authority (CA) and of a server
// certificate it signed (Cert, Key), for 127.0.0.1 and localhost.
type TLSFiles struct {
	CA, Cert, Key string
}

// NewTLSFiles makes a CA and a node certificate signed by it in a temporary
// directory, as orderly credentials init does for a cluster.
func NewTLSFiles(tb testing.TB) TLSFiles {
	tb.Helper()
	return ClusterTLS(tb, natsauth.Credentials{Dir: tb.TempDir()})
}

// ClusterTLS makes the TLS files of creds (natsauth.InitTLS), so that As
// trusts the CA of a server started with them.
func ClusterTLS(tb testing.TB, creds natsauth.Credentials) TLSFiles {
	tb.Helper()
	if _, err := creds.InitTLS(nil); err != nil {
		tb.Fatal(err)
	}
	return TLSFiles{CA: creds.TLSPath(natsauth.TLSCAFile), Cert: creds.TLSPath(natsauth.TLSNodeFile), Key: creds.TLSPath(natsauth.TLSNodeKeyFile)}
}

// TLSNATS starts a NATS server with JetStream that requires TLS on its
// client port (files' certificate) and admits creds' users, and returns its
// URL, tls://127.0.0.1:<port>. Without files (the zero value) it starts the
// same server without TLS and returns a nats:// URL. The test's end stops it.
func TLSNATS(tb testing.TB, creds natsauth.Credentials, files TLSFiles) string {
	tb.Helper()
	return tlsNATS(tb, creds, files, false)
}

// TLSNATSVerifying is TLSNATS with a server that also asks every client for
// a certificate signed by files' CA (tls { verify: true }).
func TLSNATSVerifying(tb testing.TB, creds natsauth.Credentials, files TLSFiles) string {
	tb.Helper()
	return tlsNATS(tb, creds, files, true)
}

func tlsNATS(tb testing.TB, creds natsauth.Credentials, files TLSFiles, verify bool) string {
	tb.Helper()
	opts, err := natsserver.Options(natsserver.Config{ServerName: "tls", StoreDir: tb.TempDir(), Listen: "127.0.0.1:-1",
		Fsync: natsserver.Fsync{Interval: time.Second}, Accounts: creds.ConfigPath(), TLSCert: files.Cert, TLSKey: files.Key})
	if err != nil {
		tb.Fatal(err)
	}
	scheme := "nats://"
	if files.Cert != "" {
		scheme = "tls://"
	}
	if verify {
		// The embedded server never asks for client certificates.
		tc := &server.TLSConfigOpts{CertFile: files.Cert, KeyFile: files.Key, CaFile: files.CA, Verify: true}
		if opts.TLSConfig, err = server.GenTLSConfig(tc); err != nil {
			tb.Fatal(err)
		}
		opts.TLSVerify = true
	}
	ns := RunNATS(tb, opts)
	url := scheme + ns.Addr().String()
	register(url, creds)
	return url
}
