package natsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/orderly-dev/orderly/internal/filesync"
)

// The TLS of a deployed cluster (deploy/nats/node.conf, ADR 0025): a CA of
// its own, and one certificate for every node, for its client port and its
// routes (which nats-server verifies both ways). orderly's processes trust
// the CA with --nats-ca TLSCAFile. The keys are mode 0600, like the seeds.
// orderly serve's embedded server has the same four files in its own
// credentials directory when it requires TLS (ADR 0026).
const (
	TLSCAFile      = "tls-ca.pem"
	TLSCAKeyFile   = "tls-ca.key"
	TLSNodeFile    = "tls-node.pem"
	TLSNodeKeyFile = "tls-node.key"
)

// DefaultTLSHosts are the names the nodes' certificate is valid for without
// --tls-host: the compose file's nodes, and this host's loopback
// (scripts/cluster.sh, an operator's nats CLI through a published port).
var DefaultTLSHosts = []string{"nats-1", "nats-2", "nats-3", "localhost", "127.0.0.1", "::1"}

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	nodeValidity = 2 * 365 * 24 * time.Hour
	// renewBefore: InitTLS issues the node certificate again when it
	// expires within this.
	renewBefore = 30 * 24 * time.Hour
)

// TLSPath is the path of one of the TLS files.
func (c Credentials) TLSPath(name string) string { return filepath.Join(c.Dir, name) }

// TLSIssued says what InitTLS made.
type TLSIssued struct {
	// CA: a new CA (every node and every orderly process must take it).
	CA bool
	// Node: a new node certificate, and why.
	Node   bool
	Reason string
	// Hosts are the names the node certificate is valid for.
	Hosts []string
	// Expires is when the node certificate expires.
	Expires time.Time
}

// InitTLS creates the cluster's CA if it is missing, and issues the nodes'
// certificate if it is missing, not signed by the CA, not valid for every one
// of hosts and DefaultTLSHosts, or expiring within 30 days. A certificate
// issued again keeps the names of the one before. Like Init, it keeps what
// is there and fit for use.
func (c Credentials) InitTLS(hosts []string) (TLSIssued, error) {
	var out TLSIssued
	for _, h := range hosts {
		if !ValidTLSHost(h) {
			return out, fmt.Errorf("credentials: TLS host %q: give a DNS name or an IP address", h)
		}
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return out, fmt.Errorf("credentials: %w", err)
	}
	ca, caKey, err := c.loadCA()
	if errors.Is(err, os.ErrNotExist) {
		if ca, caKey, err = c.newCA(); err != nil {
			return out, err
		}
		out.CA = true
	} else if err != nil {
		return out, err
	}
	want := slices.Concat(DefaultTLSHosts, hosts)
	node, err := readCert(c.TLSPath(TLSNodeFile))
	switch {
	case err != nil:
		out.Reason = "none yet"
	case node.CheckSignatureFrom(ca) != nil:
		out.Reason = "not signed by " + TLSCAFile
	case time.Until(node.NotAfter) < renewBefore:
		out.Reason = "expires " + node.NotAfter.Format(time.DateOnly)
	default:
		for _, h := range want {
			if node.VerifyHostname(h) != nil {
				out.Reason = "not valid for " + h
				break
			}
		}
	}
	if out.Reason == "" {
		if key, err := readKey(c.TLSPath(TLSNodeKeyFile)); err != nil {
			out.Reason = "its key is missing or unreadable"
		} else if !key.PublicKey.Equal(node.PublicKey) {
			out.Reason = "its key is not the certificate's"
		}
	}
	if out.Reason == "" {
		out.Hosts, out.Expires = certHosts(node), node.NotAfter
		return out, nil
	}
	if node != nil && node.CheckSignatureFrom(ca) == nil {
		want = append(want, certHosts(node)...) // keep the names it had
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if out.Expires, err = c.newNodeCert(ca, caKey, want); err != nil {
		return out, err
	}
	out.Node, out.Hosts = true, want
	return out, nil
}

// CheckTLS reports what makes the TLS files unusable: one missing, a key
// that others may read, a node certificate the CA did not sign.
func (c Credentials) CheckTLS() error {
	ca, err := readCert(c.TLSPath(TLSCAFile))
	if err != nil {
		return fmt.Errorf("credentials: %w: run orderly credentials init", err)
	}
	node, err := readCert(c.TLSPath(TLSNodeFile))
	if err != nil {
		return fmt.Errorf("credentials: %w: run orderly credentials init", err)
	}
	if node.CheckSignatureFrom(ca) != nil {
		return fmt.Errorf("credentials: %s is not signed by %s: run orderly credentials init", c.TLSPath(TLSNodeFile), c.TLSPath(TLSCAFile))
	}
	for _, k := range []string{TLSCAKeyFile, TLSNodeKeyFile} {
		if _, err := os.Stat(c.TLSPath(k)); err != nil {
			return fmt.Errorf("credentials: %w: run orderly credentials init", err)
		}
		if err := readableByOthers(c.TLSPath(k)); err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
	}
	return nil
}

// loadCA reads the CA and its key; os.ErrNotExist when neither exists.
func (c Credentials) loadCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	_, certErr := os.Stat(c.TLSPath(TLSCAFile))
	_, keyErr := os.Stat(c.TLSPath(TLSCAKeyFile))
	switch {
	case certErr != nil && keyErr != nil:
		return nil, nil, os.ErrNotExist
	case certErr != nil || keyErr != nil:
		return nil, nil, fmt.Errorf("credentials: %s and %s go together and one is missing: restore it, or delete both and run orderly credentials init again (a new CA: restart every node and every orderly process)",
			c.TLSPath(TLSCAFile), c.TLSPath(TLSCAKeyFile))
	}
	ca, err := readCert(c.TLSPath(TLSCAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	key, err := readKey(c.TLSPath(TLSCAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("credentials: %s is not the key of %s", c.TLSPath(TLSCAKeyFile), c.TLSPath(TLSCAFile))
	}
	return ca, key, nil
}

func (c Credentials) newCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"orderly"}, CommonName: "orderly NATS cluster CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	// The key first: a CA certificate without its key is refused at the
	// next run, while a key alone is overwritten with a new pair.
	if err := writeKey(c.TLSPath(TLSCAKeyFile), key); err != nil {
		return nil, nil, err
	}
	if err := filesync.WriteFile(c.TLSPath(TLSCAFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	return ca, key, nil
}

func (c Credentials) newNodeCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string) (time.Time, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return time.Time{}, fmt.Errorf("credentials: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"orderly"}, CommonName: "orderly NATS node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(nodeValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Server for clients and routes, client for the routes it dials.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return time.Time{}, fmt.Errorf("credentials: %w", err)
	}
	if err := writeKey(c.TLSPath(TLSNodeKeyFile), key); err != nil {
		return time.Time{}, err
	}
	if err := filesync.WriteFile(c.TLSPath(TLSNodeFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return time.Time{}, fmt.Errorf("credentials: %w", err)
	}
	return tmpl.NotAfter, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	if err := filesync.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return nil
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cert, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM key", path)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// certHosts are the names and addresses a certificate is valid for.
func certHosts(cert *x509.Certificate) []string {
	hosts := slices.Clone(cert.DNSNames)
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	return hosts
}

// ValidTLSHost reports whether a certificate can name h: an IP address or a
// DNS name.
func ValidTLSHost(h string) bool {
	return h != "" && len(h) <= 253 && (net.ParseIP(h) != nil || validDNSName(h))
}

// validDNSName: letters, digits, '-' and '.', in labels of 1-63 characters.
func validDNSName(h string) bool {
	label := 0
	for i := 0; i < len(h); i++ {
		switch b := h[i]; {
		case b == '.':
			if label == 0 {
				return false
			}
			label = 0
		case b == '-' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z':
			label++
			if label > 63 {
				return false
			}
		default:
			return false
		}
	}
	return label > 0
}
