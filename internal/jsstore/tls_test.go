package jsstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestConnectOverTLS: with CAFile (--nats-ca) a process and a tool reach a
// NATS that requires TLS with a certificate of a private CA, over TLS, even
// with a nats:// URL. Without the CA, with another CA, or with a CA against
// a server that offers no TLS, both fail within seconds with an error that
// says so; before, a process waited out its whole startup budget (2 minutes
// by default) while nats.go retried a handshake that cannot succeed.
func TestConnectOverTLS(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	files := orderlytest.NewTLSFiles(t)
	url := orderlytest.TLSNATS(t, creds, files)
	plain := orderlytest.TLSNATS(t, creds, orderlytest.TLSFiles{})
	other := orderlytest.NewTLSFiles(t) // a CA that did not sign the server's certificate
	seed := creds.SeedPath(natsauth.Operator)
	connect := func(url, ca string) (*nats.Conn, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		began := time.Now()
		nc, err := jsstore.Connect(ctx, jsstore.ConnectConfig{URL: url, Name: "tls", Credentials: jsstore.Credentials{NkeyFile: seed, CAFile: ca}}, nil)
		return nc, time.Since(began), err
	}
	dial := func(url, ca string) (*nats.Conn, error) {
		return jsstore.Dial(url, jsstore.Credentials{NkeyFile: seed, CAFile: ca}, "tls")
	}

	for _, u := range []string{url, strings.Replace(url, "tls://", "nats://", 1)} {
		nc, _, err := connect(u, files.CA)
		if err != nil {
			t.Fatalf("Connect %s with the CA: %v", u, err)
		}
		if st, err := nc.TLSConnectionState(); err != nil || !st.HandshakeComplete {
			t.Fatalf("Connect %s with the CA: not over TLS (%v)", u, err)
		}
		if _, err := nc.RTT(); err != nil {
			t.Fatalf("a round trip over TLS: %v", err)
		}
		nc.Close()
		nc, err = dial(u, files.CA)
		if err != nil {
			t.Fatalf("Dial %s with the CA: %v", u, err)
		}
		if _, err := nc.TLSConnectionState(); err != nil {
			t.Fatalf("Dial %s with the CA: not over TLS (%v)", u, err)
		}
		nc.Close()
	}

	// One server whose certificate the CA did not sign does not stop a
	// process that another server of the list takes.
	elsewhere := orderlytest.TLSNATS(t, creds, other)
	nc, _, err := connect(elsewhere+","+url, files.CA)
	if err != nil {
		t.Fatalf("Connect to a list with one untrusted server: %v", err)
	}
	nc.Close()

	for _, tc := range []struct {
		name, url, ca string
		want          []string
	}{
		{"no CA", url, "", []string{"not trusted", "--nats-ca"}},
		{"another CA", url, other.CA, []string{"--nats-ca " + other.CA}},
		{"a CA, a server without TLS", plain, files.CA, []string{"does not offer it"}},
	} {
		nc, took, err := connect(tc.url, tc.ca)
		if err == nil {
			nc.Close()
			t.Fatalf("%s: Connect succeeded", tc.name)
		}
		if !errors.Is(err, jsstore.ErrTLS) || took > 10*time.Second {
			t.Errorf("%s: Connect after %s: %v, want ErrTLS within seconds", tc.name, took.Round(time.Millisecond), err)
		}
		nc, derr := dial(tc.url, tc.ca)
		if derr == nil {
			nc.Close()
			t.Fatalf("%s: Dial succeeded", tc.name)
		}
		if !errors.Is(derr, jsstore.ErrTLS) {
			t.Errorf("%s: Dial: %v, want ErrTLS", tc.name, derr)
		}
		for _, w := range tc.want {
			for _, e := range []error{err, derr} {
				if !strings.Contains(e.Error(), w) {
					t.Errorf("%s: %q does not say %q", tc.name, e, w)
				}
			}
		}
	}

	// A CA file that is missing or holds no certificate fails before any
	// connection, naming the flag.
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ca := range []string{notPEM, filepath.Join(t.TempDir(), "missing.pem")} {
		if _, err := dial(url, ca); err == nil || !strings.Contains(err.Error(), "--nats-ca "+ca) {
			t.Errorf("Dial with CA file %s: %v, want an error naming it", ca, err)
		}
		if _, _, err := connect(url, ca); err == nil || !strings.Contains(err.Error(), "--nats-ca "+ca) {
			t.Errorf("Connect with CA file %s: %v, want an error naming it", ca, err)
		}
	}
}

// TestClientCertificate: against a NATS that asks every client for a
// certificate of its CA (tls { verify: true }), a connection with
// CertFile and KeyFile (--nats-cert, --nats-key) gets in; one without, or
// with a certificate of another CA, fails within seconds, naming the flags,
// for a process and a tool alike. Half a pair is refused before any
// connection.
func TestClientCertificate(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	files := orderlytest.NewTLSFiles(t)
	url := orderlytest.TLSNATSVerifying(t, creds, files)
	other := orderlytest.NewTLSFiles(t)
	seed := creds.SeedPath(natsauth.Operator)
	for _, tc := range []struct {
		name      string
		cert, key string
		ok        bool
	}{
		{"the CA's certificate", files.Cert, files.Key, true},
		{"no certificate", "", "", false},
		{"another CA's certificate", other.Cert, other.Key, false},
	} {
		c := jsstore.Credentials{NkeyFile: seed, CAFile: files.CA, CertFile: tc.cert, KeyFile: tc.key}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		began := time.Now()
		nc, err := jsstore.Connect(ctx, jsstore.ConnectConfig{URL: url, Name: "cert", Credentials: c}, nil)
		took := time.Since(began)
		cancel()
		nc2, derr := jsstore.Dial(url, c, "cert")
		if tc.ok {
			if err != nil || derr != nil {
				t.Fatalf("%s: Connect %v, Dial %v", tc.name, err, derr)
			}
			if _, err := nc.RTT(); err != nil {
				t.Fatalf("%s: a round trip: %v", tc.name, err)
			}
			nc.Close()
			nc2.Close()
			continue
		}
		for what, e := range map[string]error{"Connect": err, "Dial": derr} {
			if e == nil || !errors.Is(e, jsstore.ErrTLS) || !strings.Contains(e.Error(), "--nats-cert") {
				t.Errorf("%s: %s: %v, want ErrTLS naming --nats-cert", tc.name, what, e)
			}
		}
		if took > 10*time.Second {
			t.Errorf("%s: Connect gave up after %s, want within seconds", tc.name, took.Round(time.Millisecond))
		}
		if nc != nil {
			nc.Close()
		}
		if nc2 != nil {
			nc2.Close()
		}
	}
	if _, err := jsstore.Dial(url, jsstore.Credentials{NkeyFile: seed, CAFile: files.CA, CertFile: files.Cert}, "half"); err == nil || !strings.Contains(err.Error(), "together") {
		t.Fatalf("a certificate without its key: %v", err)
	}
}
