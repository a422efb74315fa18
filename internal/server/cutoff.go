package server

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// cutOffAfter is how long the NATS node that a process is connected to must
// say that it lost its cluster before the process moves to another node
// (jsstore.CutOff): longer than an election of the majority's nodes.
const cutOffAfter = 10 * time.Second

// leaveACutOffNode asks the NATS node every second whether JetStream is
// available (an account info, which the node answers itself) and moves the
// connection to another node of the cluster when the node has said for
// cutOffAfter that it lost its cluster: a node cut off from the majority by
// the network keeps its clients, which would stay not ready until the
// network heals. Each move counts in moves.
func (s *Server) leaveACutOffNode(js jetstream.JetStream, moves prometheus.Counter) {
	co := jsstore.CutOff{After: cutOffAfter}
	s.every(time.Second, func() bool {
		if !s.nc.IsConnected() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if !co.Observe(err, time.Now()) {
			return true
		}
		url := s.nc.ConnectedUrlRedacted()
		if len(s.nc.Servers()) < 2 {
			s.logger.Warn("the NATS server has lost its cluster, and no other server is known to move to", "url", url, "for", cutOffAfter, "err", err)
			return true
		}
		s.logger.Warn("the NATS server has lost its cluster: moving to another server", "url", url, "for", cutOffAfter, "err", err)
		if err := s.nc.ForceReconnect(); err != nil {
			s.logger.Error("moving to another NATS server", "err", err)
			return true
		}
		moves.Inc()
		return true
	})
}

// connectionMetrics are the reconnects of nc (after a lost connection, a
// server that stopped answering pings, or a move away from one that lost its
// cluster) and the moves, which leaveACutOffNode counts; a process on an
// embedded server, which never moves, exposes them at 0 too.
func connectionMetrics(nc *nats.Conn) (reconnects prometheus.Collector, moves prometheus.Counter) {
	reconnects = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "orderly_nats_reconnects_total",
		Help: "Reconnects of the process's NATS connection: after a lost connection, a server that stopped answering pings, or a move away from a server that lost its cluster."},
		func() float64 { return float64(nc.Stats().Reconnects) })
	moves = prometheus.NewCounter(prometheus.CounterOpts{Name: "orderly_nats_node_moves_total",
		Help: "Moves of the NATS connection to another server because the one it was on had lost its cluster (ADR 0027)."})
	return reconnects, moves
}
