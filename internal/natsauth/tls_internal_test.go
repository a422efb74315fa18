package natsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestInitTLS: credentials init makes the cluster's CA and a node
// certificate for the default names, both usable by a server and by a
// route's client side; it keeps them on later runs, and issues the node
// certificate again (same CA, the names it had kept) when it lacks a name,
// expires within 30 days, or was signed by another CA. A CA without its key,
// a key that others may read and a name that is not one are refused.
func TestInitTLS(t *testing.T) {
	t.Parallel()
	c := Credentials{Dir: t.TempDir()}
	first, err := c.InitTLS(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !first.CA || !first.Node {
		t.Fatalf("first init: %+v, want a CA and a node certificate", first)
	}
	if err := c.CheckTLS(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{TLSCAKeyFile, TLSNodeKeyFile} {
		if st, err := os.Stat(c.TLSPath(k)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, want mode 0600", k, err)
		}
	}
	ca, node := mustCert(t, c.TLSPath(TLSCAFile)), mustCert(t, c.TLSPath(TLSNodeFile))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, h := range DefaultTLSHosts {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := node.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("the node certificate for %s, usage %v: %v", h, usage, err)
			}
		}
	}
	if _, err := node.Verify(x509.VerifyOptions{DNSName: "nats-4", Roots: roots}); err == nil {
		t.Error("the node certificate is valid for nats-4, a name nobody asked for")
	}

	again, err := c.InitTLS(nil)
	if err != nil || again.CA || again.Node {
		t.Fatalf("second init: %+v %v, want nothing issued", again, err)
	}
	if !mustCert(t, c.TLSPath(TLSNodeFile)).Equal(node) {
		t.Fatal("second init changed the node certificate")
	}

	added, err := c.InitTLS([]string{"nats.example.com", "10.0.0.7"})
	if err != nil || added.CA || !added.Node || !strings.Contains(added.Reason, "nats.example.com") {
		t.Fatalf("init with a new host: %+v %v, want the node certificate only, naming the host", added, err)
	}
	renewed := mustCert(t, c.TLSPath(TLSNodeFile))
	for _, h := range append([]string{"nats.example.com", "10.0.0.7"}, DefaultTLSHosts...) {
		if renewed.VerifyHostname(h) != nil {
			t.Errorf("the certificate issued again is not valid for %s", h)
		}
	}
	if !mustCert(t, c.TLSPath(TLSCAFile)).Equal(ca) {
		t.Fatal("a new host changed the CA")
	}
	if kept, _ := c.InitTLS(nil); kept.Node || !slices.Contains(kept.Hosts, "nats.example.com") {
		t.Fatalf("init without the host again: %+v, want the certificate kept with its names", kept)
	}

	// A certificate that expires in ten days, signed by the CA.
	caKey, err := readKey(c.TLSPath(TLSCAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	short := *renewed
	short.NotAfter = time.Now().Add(10 * 24 * time.Hour)
	writeCert(t, c.TLSPath(TLSNodeFile), &short, ca, caKey)
	if r, err := c.InitTLS(nil); err != nil || !r.Node || !strings.Contains(r.Reason, "expires") || time.Until(r.Expires) < 365*24*time.Hour {
		t.Fatalf("init with a certificate that expires soon: %+v %v", r, err)
	}

	// A certificate of another CA.
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherCA := &x509.Certificate{SerialNumber: big.NewInt(9), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), PublicKey: &otherKey.PublicKey}
	writeCert(t, c.TLSPath(TLSNodeFile), renewed, otherCA, otherKey)
	if err := c.CheckTLS(); err == nil || !strings.Contains(err.Error(), "not signed by") {
		t.Fatalf("check with a certificate of another CA: %v", err)
	}
	if r, err := c.InitTLS(nil); err != nil || !r.Node || !strings.Contains(r.Reason, "not signed") {
		t.Fatalf("init with a certificate of another CA: %+v %v", r, err)
	}

	// A node key that is not the certificate's (a restore that mixed two
	// inits, say): nats-server would not start with the pair.
	if err := writeKey(c.TLSPath(TLSNodeKeyFile), otherKey); err != nil {
		t.Fatal(err)
	}
	if r, err := c.InitTLS(nil); err != nil || !r.Node || !strings.Contains(r.Reason, "not the certificate's") {
		t.Fatalf("init with a node key of another certificate: %+v %v", r, err)
	}
	if err := os.Chmod(c.TLSPath(TLSNodeKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckTLS(); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("check with a key others may read: %v", err)
	}
	if _, err := c.InitTLS([]string{"bad name!"}); err == nil || !strings.Contains(err.Error(), "bad name!") {
		t.Fatalf("init with a host that is not a name: %v", err)
	}
	if err := os.Remove(c.TLSPath(TLSCAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InitTLS(nil); err == nil || !strings.Contains(err.Error(), "one is missing") {
		t.Fatalf("init with the CA's key missing: %v, want a refusal (a new CA would cut every client off)", err)
	}
}

func mustCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	c, err := readCert(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeCert writes tmpl's certificate for the key of the node key file,
// signed by parent's key.
func writeCert(t *testing.T, path string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, tmpl.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}
