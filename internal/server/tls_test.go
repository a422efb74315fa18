package server_test

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestTLSCertificateExpiryIsExported: a process connected to NATS over TLS
// exports when the server's certificate expires
// (orderly_nats_tls_expiry_timestamp_seconds, the node certificate's end for
// a cluster's CA that outlives it), which OrderlyNATSCertificateExpiring
// alerts on; a process on its embedded server, without TLS, exports nothing
// under that name.
func TestTLSCertificateExpiryIsExported(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	files := orderlytest.ClusterTLS(t, creds)
	url := orderlytest.TLSNATS(t, creds, files)
	orderlytest.Setup(t, url, creds, 1)
	cfg := orderlytest.Config(t)
	orderlytest.Attach(&cfg, url, creds, natsauth.Serve)
	cfg.Credentials = orderlytest.As(creds, natsauth.Serve)
	inst := orderlytest.Start(t, cfg)
	if r := inst.PostOrder(t, "tls-1", orderlytest.Order("c-tls")); r.Status != http.StatusCreated {
		t.Fatalf("an order over TLS: %d %s", r.Status, r.Body)
	}
	b, err := os.ReadFile(files.Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	node, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if got := inst.Metric(t, "orderly_nats_tls_expiry_timestamp_seconds"); int64(got) != node.NotAfter.Unix() {
		t.Fatalf("orderly_nats_tls_expiry_timestamp_seconds %.0f, want the node certificate's end %d", got, node.NotAfter.Unix())
	}

	plain := orderlytest.Start(t, orderlytest.Config(t))
	if body := string(orderlytest.Do(t, http.MethodGet, plain.URL+"/metrics", nil).Body); strings.Contains(body, "orderly_nats_tls_expiry_timestamp_seconds ") {
		t.Fatal("a process without TLS exports a certificate expiry")
	}
}
