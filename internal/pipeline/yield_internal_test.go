package pipeline

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestYieldDue: the pipeline waits only while it is behind, its last message
// is younger than the lag, and nobody waits; off when nil or without a lag.
func TestYieldDue(t *testing.T) {
	waiting := 0
	intake := func() uint64 { return 1 }
	y := &Yield{Lag: 8 * time.Second, Waiting: func() int { return waiting }, Intake: intake}
	for _, c := range []struct {
		name    string
		y       *Yield
		pending uint64
		age     time.Duration
		waiting int
		want    bool
	}{
		{"behind, young, nobody waits", y, 500, time.Second, 0, true},
		{"just behind", y, behind, 0, 0, true},
		{"keeping pace", y, behind - 1, time.Second, 0, false},
		{"as old as the lag", y, 500, 8 * time.Second, 0, false},
		{"older than the lag", y, 500, time.Minute, 0, false},
		{"someone waits", y, 500, time.Second, 1, false},
		{"stored in the future (clock skew): bounded by the lag as it passes", y, 500, -time.Second, 0, true},
		{"nothing taken yet (zero store time)", y, 0, time.Since(time.Time{}), 0, false},
		{"off: nil", nil, 500, time.Second, 0, false},
		{"off: no lag", &Yield{Intake: intake}, 500, time.Second, 0, false},
		{"off: no intake to yield to", &Yield{Lag: time.Second}, 500, 0, 0, false},
		{"no waiter function", &Yield{Lag: time.Second, Intake: intake}, 500, 0, 0, true},
	} {
		waiting = c.waiting
		if got := c.y.due(c.pending, c.age); got != c.want {
			t.Errorf("%s: due(%d, %s) = %v, want %v", c.name, c.pending, c.age, got, c.want)
		}
	}
}

// pausing is a subscriber with its metrics, and a yield of an hour's lag
// whose intake grows at every look: its pause goes on until it is stopped.
func pausing(t *testing.T) (*subscriber, *metrics, *Yield) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), "processor", func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	var in atomic.Uint64
	return &subscriber{p: &Pipeline{m: m}}, m, &Yield{Lag: time.Hour, Intake: func() uint64 { return in.Add(1) }}
}

// TestYieldCountsFromTheClock: a tick received late carries the time it was
// due, which can be before the pause began; the time paused is counted from
// the clock, so the counter never goes back (a panic that stopped orderly
// serve in a 60 s load when it was counted from the ticks).
func TestYieldCountsFromTheClock(t *testing.T) {
	s, m, y := pausing(t)
	last := lastTaken{pending: 500, stored: time.Now()}
	tick := make(chan time.Time)
	stop := make(chan struct{})
	done := make(chan bool)
	go func() { done <- s.yield(y, last, stop, tick) }()
	tick <- time.Now().Add(-time.Minute) // due long before the pause began
	tick <- time.Time{}
	close(stop)
	if <-done {
		t.Fatal("yield after stop returned true")
	}
	var pb dto.Metric
	if err := m.yielded.Write(&pb); err != nil || pb.GetCounter().GetValue() < 0 {
		t.Fatalf("yielded %v s (%v)", pb.GetCounter().GetValue(), err)
	}
}

// TestYieldOutlastsAStall: a pause ends by itself once the intake has not
// grown for the quiet time (the burst is over), not at the first look
// without growth: a busy machine stalls the API for tens of milliseconds,
// and when one look ended the pause, a 10 s burst at 33-58% steal kept
// 0.3-4.0 s of the 8 s lag paused, deciding beside the API all along.
func TestYieldOutlastsAStall(t *testing.T) {
	s, _, y := pausing(t)
	y.quiet = time.Hour
	y.Intake = func() uint64 { return 7 }
	s.intakeGrew(y, time.Now()) // seen growing just now; then the API stalls
	last := lastTaken{pending: 500, stored: time.Now()}
	tick := make(chan time.Time)
	stop := make(chan struct{})
	done := make(chan bool)
	go func() { done <- s.yield(y, last, stop, tick) }()
	for range 5 { // looks without growth, within the quiet time
		select {
		case tick <- time.Now():
		case <-done:
			t.Fatal("the pause ended at a stall shorter than the quiet time")
		}
	}
	close(stop)
	if <-done {
		t.Fatal("yield after stop returned true")
	}

	// The burst is over: no growth for the quiet time ends the pause.
	s, _, y = pausing(t)
	y.quiet = 20 * time.Millisecond
	y.Intake = func() uint64 { return 7 }
	s.intakeGrew(y, time.Now())
	go func() { done <- s.yield(y, last, make(chan struct{}), tick) }()
	tick <- time.Now() // within the quiet time
	time.Sleep(30 * time.Millisecond)
	tick <- time.Now()
	endsByItself(t, done, "the pause did not end after the quiet time")
}

// TestYieldSaysWhilePaused: Paused is true while a pause goes on (what the
// API's Retry-After reads), and false before and after it.
func TestYieldSaysWhilePaused(t *testing.T) {
	s, _, y := pausing(t)
	if y.Paused() || (*Yield)(nil).Paused() {
		t.Fatal("paused before any pause")
	}
	tick := make(chan time.Time)
	stop := make(chan struct{})
	done := make(chan bool)
	go func() { done <- s.yield(y, lastTaken{pending: 500, stored: time.Now()}, stop, tick) }()
	tick <- time.Now() // taken: the pause has begun, and goes on (the intake grows)
	if !y.Paused() {
		t.Fatal("not paused during a pause")
	}
	close(stop)
	<-done
	if y.Paused() {
		t.Fatal("paused after the pause ended")
	}
}

// TestYieldAfterTheBurstEndsAtOnce: a pause that begins when the intake has
// not grown for the quiet time already (the burst is over, the backlog is
// being decided) ends at its first look, so that deciding the backlog is
// not slowed by a quiet time after every fetch.
func TestYieldAfterTheBurstEndsAtOnce(t *testing.T) {
	s, _, y := pausing(t)
	y.Intake = func() uint64 { return 7 }
	s.intakeGrew(y, time.Now().Add(-time.Second)) // last seen growing a second ago
	tick := make(chan time.Time, 1)
	done := make(chan bool)
	go func() { done <- s.yield(y, lastTaken{pending: 500, stored: time.Now()}, make(chan struct{}), tick) }()
	tick <- time.Now()
	endsByItself(t, done, "a pause begun after the burst did not end at its first look")
}

// endsByItself waits for a yield that was not stopped to return true.
func endsByItself(t *testing.T, done <-chan bool, otherwise string) {
	t.Helper()
	select {
	case ended := <-done:
		if !ended {
			t.Fatal("yield returned false without a stop")
		}
	case <-time.After(5 * time.Second):
		t.Fatal(otherwise)
	}
}
