package server

import (
	"crypto/tls"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// tlsExpiry exports when the certificates of the NATS server a process is
// connected to expire: the earliest end of the chain it verified (the
// node's certificate, or the CA when that ends first). Nothing while the
// connection is not TLS (orderly serve's embedded server on loopback). The
// alert OrderlyNATSCertificateExpiring reads it: a node certificate lasts
// two years, and orderly credentials init (ADR 0025), or serve's start or
// SIGHUP for its embedded server (ADR 0026), issues it again only when it
// runs.
type tlsExpiry struct {
	nc   *nats.Conn
	desc *prometheus.Desc
}

func newTLSExpiry(nc *nats.Conn) *tlsExpiry {
	return &tlsExpiry{nc: nc, desc: prometheus.NewDesc("orderly_nats_tls_expiry_timestamp_seconds",
		"When the first certificate of the chain the connected NATS server presented expires (Unix time); absent without TLS.", nil, nil)}
}

func (t *tlsExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

func (t *tlsExpiry) Collect(ch chan<- prometheus.Metric) {
	st, err := t.nc.TLSConnectionState()
	if err != nil {
		return
	}
	if end, ok := chainExpiry(st); ok {
		ch <- prometheus.MustNewConstMetric(t.desc, prometheus.GaugeValue, float64(end.Unix()))
	}
}

// chainExpiry is the earliest NotAfter of the verified chain (or of the
// presented certificates when none was verified).
func chainExpiry(st tls.ConnectionState) (time.Time, bool) {
	certs := st.PeerCertificates
	if len(st.VerifiedChains) > 0 {
		certs = st.VerifiedChains[0]
	}
	var end time.Time
	for _, c := range certs {
		if end.IsZero() || c.NotAfter.Before(end) {
			end = c.NotAfter
		}
	}
	return end, !end.IsZero()
}
