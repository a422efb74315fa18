// Package attempt is how long one attempt of a NATS call waits for its
// answer, for the API's calls (internal/app) and the writes of the
// processor, the projector and the dead letters (internal/jsstore) alike.
//
// The first attempt's bound is far above a publish's latency under load; an
// attempt that outlives it meets a NATS that does not answer (a leader
// election, acks held up, a publish lost in a leader's failure), and the
// next attempt waits a second longer, up to Max: long enough to hear acks
// that are seconds late, short enough that a request sent into a leader
// change is sent again soon after the new leader takes writes.
package attempt

import "time"

// First bounds the first attempt; Max any attempt.
const (
	First = time.Second
	Max   = 3 * time.Second
)

// Timeout is the bound of attempt n (1 for the first): n seconds, at most Max.
func Timeout(n int) time.Duration {
	return min(time.Duration(n)*First, Max)
}
