package pipeline

import (
	"sync/atomic"
	"time"
)

// Yield lets a pipeline's handling trail its stream by up to Lag while the
// pipeline is behind, something fills the stream and nobody waits for the
// pipeline, so that the cores go to what fills the stream (the API accepting
// a burst; ADR 0015).
//
// After each group of messages it takes, the pipeline looks at the last
// one: when at least behind messages are pending after it and it is younger
// than Lag, the pipeline fetches nothing more until that message is Lag old,
// Waiting reports a waiter, or Intake has not grown for quietEnd (the burst
// is over: the cores are free). So a message waits at most about Lag (plus
// the work before it), a request that waits for a decision ends the pause at
// once, and a trickle, which the pipeline keeps up with, is never delayed.
type Yield struct {
	// Lag is how far behind the stream the handling may fall; 0 (or less) never
	// yields.
	Lag time.Duration
	// Waiting reports how many requests of this process wait for the
	// pipeline's outcome; any ends the pause. Nil: nobody ever waits.
	Waiting func() int
	// Intake counts what this process has put into the stream; a pause ends
	// when it has not grown for quietEnd. Nil: never yields.
	Intake func() uint64

	quiet  time.Duration // quietEnd when 0; tests shorten it
	paused atomic.Int32  // pauses going on now
}

// Paused says whether the pipeline is pausing now: what comes into its
// stream now waits up to about Lag for its handling, where it is handled
// at once otherwise. Nil: never.
func (y *Yield) Paused() bool { return y != nil && y.paused.Load() > 0 }

// behind is how many pending messages make a pipeline behind. Under a 10 s
// async load on two cores the processor, when it keeps pace, leaves fewer
// than 100 commands pending after a group: a threshold of 100 never yielded
// there, one of 10 yielded throughout (ADR 0015).
const behind = 10

// yieldTick is how often a pause looks at the waiters and the intake.
const yieldTick = 10 * time.Millisecond

// quietEnd is how long the intake must not grow for a pause to end: the
// burst is over. It is longer than the stalls of a busy machine: when one
// tick without growth ended the pause, a 10 s burst on two cores with
// 33-58% of their time stolen by the hypervisor saw 2-19 pauses end so,
// 0.3-4.0 s paused of the 8 the lag allowed; with 100 and 250 ms, 7.1-9.1 s
// (ADR 0015's addendum).
const quietEnd = 250 * time.Millisecond

// quietFor is how long the intake must not grow for a pause to end.
func (y *Yield) quietFor() time.Duration {
	if y.quiet > 0 {
		return y.quiet
	}
	return quietEnd
}

// due says whether the pipeline should wait before its next fetch, given the
// messages pending after the last one taken and that message's age now.
func (y *Yield) due(pending uint64, age time.Duration) bool {
	if y == nil || y.Lag <= 0 || y.Intake == nil {
		return false
	}
	return pending >= behind && age < y.Lag && !y.waited()
}

func (y *Yield) waited() bool { return y.Waiting != nil && y.Waiting() > 0 }

// lastTaken is what the pump remembers of the last message it took.
type lastTaken struct {
	pending uint64
	stored  time.Time // when the message was stored
}
