package orderlytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
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

// NewTLSFiles makes a CA and a server certificate signed by it, valid for a
// day, in a temporary directory.
func NewTLSFiles(tb testing.TB) TLSFiles {
	tb.Helper()
	dir := tb.TempDir()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "orderly test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, ca := sign(tb, caTmpl, caTmpl, caKey, caKey)
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "nats"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, _ := sign(tb, tmpl, ca, key, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	writePEM(tb, f.CA, "CERTIFICATE", caDER)
	writePEM(tb, f.Cert, "CERTIFICATE", der)
	writePEM(tb, f.Key, "EC PRIVATE KEY", keyDER)
	return f
}

// sign makes the certificate of tmpl for key's public key, signed by
// parent's key, as DER and parsed.
func sign(tb testing.TB, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) ([]byte, *x509.Certificate) {
	tb.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return der, cert
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// TLSNATS starts a NATS server with JetStream that requires TLS on its
// client port (files' certificate) and admits creds' users, and returns its
// URL, tls://127.0.0.1:<port>. Without files (the zero value) it starts the
// same server without TLS and returns a nats:// URL. The test's end stops it.
func TLSNATS(tb testing.TB, creds natsauth.Credentials, files TLSFiles) string {
	tb.Helper()
	opts, err := natsserver.Options(natsserver.Config{ServerName: "tls", StoreDir: tb.TempDir(), Listen: "127.0.0.1:-1",
		Fsync: natsserver.Fsync{Interval: time.Second}, Accounts: creds.ConfigPath()})
	if err != nil {
		tb.Fatal(err)
	}
	scheme := "nats://"
	if files.Cert != "" {
		if opts.TLSConfig, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: files.Cert, KeyFile: files.Key}); err != nil {
			tb.Fatal(err)
		}
		opts.TLS, opts.TLSTimeout, scheme = true, 2, "tls://"
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	go ns.Start()
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatal("NATS with TLS not ready")
	}
	url := scheme + ns.Addr().String()
	register(url, creds)
	return url
}
