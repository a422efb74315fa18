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

// silentAfter is how long the NATS node may leave the process's pings
// unanswered before the process moves to another node.
const silentAfter = 5 * time.Second

// watchNATSNode pings the NATS node every second and asks it whether
// JetStream is available (an account info, which the node answers itself),
// and moves the connection to another node of the cluster when the node has
// answered no ping for silentAfter (it hangs: a frozen host, a network that
// drops every byte) or has said for cutOffAfter that it lost its cluster (a
// node cut off from the majority by the network keeps its clients, which
// would stay not ready until the network heals). A move is nats.go's
// ForceReconnect, which also fails at once the requests still waiting on the
// old connection (nats.go's own reconnect after unanswered pings leaves them
// to their timeouts: the remaking of a feed's consumer waited 10 s for its
// attempt). Each move counts in moves.
func (s *Server) watchNATSNode(js jetstream.JetStream, moves prometheus.Counter) {
	co := jsstore.CutOff{After: cutOffAfter}
	quiet := silence{after: silentAfter}
	move := func(why string, args ...any) {
		url := s.nc.ConnectedUrlRedacted()
		if len(s.nc.Servers()) < 2 {
			s.logger.Warn(why+", and no other server is known to move to", append([]any{"url", url}, args...)...)
			return
		}
		s.logger.Warn(why+": moving to another server", append([]any{"url", url}, args...)...)
		if err := s.nc.ForceReconnect(); err != nil {
			s.logger.Error("moving to another NATS server", "err", err)
			return
		}
		moves.Inc()
	}
	s.every(time.Second, func() bool {
		if !s.nc.IsConnected() {
			quiet = silence{after: silentAfter} // a new connection, a new count
			return true
		}
		sent := time.Now()
		err := s.nc.FlushTimeout(time.Second)
		if quiet.observe(err, sent, time.Now()) {
			move("the NATS server does not answer pings", "for", silentAfter, "err", err)
		}
		if err != nil {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = js.AccountInfo(ctx)
		cancel()
		if co.Observe(err, time.Now()) {
			move("the NATS server has lost its cluster", "for", cutOffAfter, "err", err)
		}
		return true
	})
}

// silence counts how long the NATS node has left the pings unanswered.
type silence struct {
	after time.Duration
	since time.Time // when the first of the unbroken unanswered pings was sent
}

// observe records a ping sent at sent and its outcome err at now, and
// reports whether to move now: when the pings have gone unanswered for
// after since the first of them was sent. An answered ping ends the run; a
// move starts the count again.
func (q *silence) observe(err error, sent, now time.Time) bool {
	if err == nil {
		q.since = time.Time{}
		return false
	}
	if q.since.IsZero() {
		q.since = sent
	}
	if now.Sub(q.since) >= q.after {
		q.since = time.Time{}
		return true
	}
	return false
}

// connectionMetrics are the reconnects of nc (after a lost connection, or a
// move) and the moves, which watchNATSNode counts; a process on an
// embedded server, which never moves, exposes them at 0 too.
func connectionMetrics(nc *nats.Conn) (reconnects prometheus.Collector, moves prometheus.Counter) {
	reconnects = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "orderly_nats_reconnects_total",
		Help: "Reconnects of the process's NATS connection: after a lost connection, or a move (orderly_nats_node_moves_total)."},
		func() float64 { return float64(nc.Stats().Reconnects) })
	moves = prometheus.NewCounter(prometheus.CounterOpts{Name: "orderly_nats_node_moves_total",
		Help: "Moves of the NATS connection to another server because the one it was on answered no ping for 5 s or had lost its cluster (ADR 0027)."})
	return reconnects, moves
}
