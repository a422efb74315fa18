package jsstore

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errCodeClusterNotAvailable is nats-server's answer to a JetStream request
// while the node has had no meta leader for a while: "JetStream system
// temporarily unavailable". A node cut off from its cluster's majority gives
// it to every request (measured: from 6 to 17 s after the cut), though the
// connection to it is healthy; a node of the majority gives it only during an
// election, for a few seconds.
const errCodeClusterNotAvailable = 10008

// IsCutOff reports whether err is the node saying that it has lost its
// cluster (errCodeClusterNotAvailable).
func IsCutOff(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeClusterNotAvailable
}

// CutOff decides when a process should leave the NATS node it is connected
// to: when the node has answered that it lost its cluster (IsCutOff) in every
// answer for After. nats.go keeps a connection on a healthy socket, so
// without a move a process whose node is cut off from the others waits,
// not ready, until the network heals, though the other nodes could serve it.
// After outlasts an election of the majority's nodes (4 to 9 s), so that a
// node that only waits for a new meta leader is not left.
type CutOff struct {
	After time.Duration
	since time.Time // the first of the unbroken cut-off answers
}

// Observe records the answer err of a JetStream request to the node, made
// at now, and reports whether to move now. Any other answer, an error of
// the request included, ends the run of cut-off answers; a request that got
// no answer (a timeout: the node may be busy) neither ends it nor extends it.
// After a move the count starts again.
func (c *CutOff) Observe(err error, now time.Time) bool {
	switch {
	case IsCutOff(err):
		if c.since.IsZero() {
			c.since = now
		}
		if now.Sub(c.since) >= c.After {
			c.since = time.Time{}
			return true
		}
	case IsUnavailable(err) && !isAPIError(err):
	default:
		c.since = time.Time{}
	}
	return false
}

func isAPIError(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr)
}
