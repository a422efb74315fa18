package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/progress"
)

// TestProgressWritesLinesWhereNoTerminalIs: a log file or a CI job gets a
// line now and then, not a bar redrawn with carriage returns.
func TestProgressWritesLinesWhereNoTerminalIs(t *testing.T) {
	quickProgress(t)

	var out bytes.Buffer
	var n atomic.Int64
	start := time.Now()
	stop := Progress(&out, start, 0, 100, n.Load, func(n int64, _ time.Time) string {
		return fmt.Sprintf("%9d requests", n)
	})
	for range 10 {
		n.Add(10)
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	got := out.String()
	if strings.ContainsAny(got, "\r\x1b") {
		t.Fatalf("carriage returns or escapes where no terminal is:\n%q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	want := regexp.MustCompile(`^ +\d+s +\d+% \d+ requests$`)
	for _, l := range lines {
		if !want.MatchString(l) {
			t.Errorf("line %q, want the time, the share done and the label", l)
		}
	}
	if len(lines) < 2 || !strings.HasSuffix(lines[len(lines)-1], "s 100% 100 requests") {
		t.Errorf("%d lines, the last %q; want several, the last at 100%%:\n%s", len(lines), lines[len(lines)-1], got)
	}
}

// TestTimedRunEndsAtAHundredPercent: a run that lasted its duration ends
// its progress at 100%: the bar spans the load's deadline, not the
// duration from a start taken after it.
func TestTimedRunEndsAtAHundredPercent(t *testing.T) {
	quickProgress(t)

	srv := httptest.NewServer(BaselineHandler())
	defer srv.Close()
	var out bytes.Buffer
	_, err := Run(context.Background(), "t", Config{
		URL: srv.URL, Connections: 2, Duration: 100 * time.Millisecond, PayloadSize: 500, Mix: Mix{New: 100}, Progress: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^ +\d+s 100% +\d+ requests`).MatchString(last) {
		t.Errorf("last line %q, want the run at 100%%:\n%s", last, out.String())
	}
}

// TestProgressEveryWritesShortWindows: with ProgressEvery below a second,
// a run writes a line per window, each with its time to a hundredth of a
// second, its rate and its p99, where the default would write one line at
// the end: the windows show when a stall (a collection, say) happens.
func TestProgressEveryWritesShortWindows(t *testing.T) {
	srv := httptest.NewServer(BaselineHandler())
	defer srv.Close()
	var out bytes.Buffer
	before := time.Now()
	res, err := Run(context.Background(), "t", Config{
		URL: srv.URL, Connections: 2, Duration: 500 * time.Millisecond, PayloadSize: 500, Mix: Mix{New: 100},
		Progress: &out, ProgressEvery: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The lines' 0 s, for lining them up with a server's log: after the
	// call began, and at least the run's length ago.
	if took := time.Duration(res.Seconds * float64(time.Second)); res.Started.Before(before) || time.Since(res.Started) < took {
		t.Errorf("started %s: want after %s and at least the run's %s ago", res.Started, before, took)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := regexp.MustCompile(`^ +\d+\.\d\ds +\d+% +\d+ requests +\d+ req/s +p99 +(\d+\.\d ms|-)$`)
	for _, l := range lines {
		if !want.MatchString(l) {
			t.Errorf("line %q, want the time to a hundredth of a second, the share done, the rate and the p99", l)
		}
	}
	for i := 1; i < len(lines); i++ {
		if lines[i] == lines[i-1] {
			t.Errorf("line %d written twice: %q", i, lines[i])
		}
	}
	// 500 ms in windows of 50 ms: about ten lines, some lost to a busy
	// machine (a ticker drops the ticks its reader misses); the default
	// (5 s) writes one.
	if len(lines) < 4 {
		t.Errorf("%d lines in 500 ms at one every 50 ms, want at least 4:\n%s", len(lines), out.String())
	}
}

// TestRateOfAShortIntervalIsTheOneBefore: the line drawn at the end, just
// after the last tick's, shows the rate of the interval before it, not NaN
// (no time, no requests) nor the rate of a few stragglers over microseconds.
func TestRateOfAShortIntervalIsTheOneBefore(t *testing.T) {
	t0 := time.Now()
	r := rater{lastAt: t0, min: 250 * time.Millisecond}
	if got, _ := r.at(1000, t0.Add(time.Second)); got != 1000 {
		t.Fatalf("1,000 requests in 1 s: %v req/s", got)
	}
	if got, _ := r.at(1000, t0.Add(time.Second)); got != 1000 {
		t.Errorf("the same instant again: %v req/s, want the last interval's 1000", got)
	}
	if got, _ := r.at(1013, t0.Add(time.Second+3*time.Millisecond)); got != 1000 {
		t.Errorf("13 more in 3 ms: %v req/s, want the last interval's 1000", got)
	}
	if got, _ := r.at(1513, t0.Add(1500*time.Millisecond)); got != 1026 {
		t.Errorf("513 more in the 500 ms since the last full interval: %v req/s, want 1026", got)
	}
}

// TestP99IsOfTheIntervalOnly: each line's p99 is of the requests that ended
// since the line before, so a tail that grows halfway through a run shows
// when it does; an interval in which no request ended has none.
func TestP99IsOfTheIntervalOnly(t *testing.T) {
	t0 := time.Now()
	var lat window
	r := rater{lastAt: t0, min: 250 * time.Millisecond, lat: &lat}
	for i := range 1000 {
		lat.add(time.Duration(i+1) * 10 * time.Microsecond) // 10 µs to 10 ms
	}
	_, p99 := r.at(1000, t0.Add(time.Second))
	if want := 9900 * time.Microsecond; p99 < want || p99 > want*1045/1000 {
		t.Errorf("first interval: p99 %s, want %s within a bucket (4.4%%)", p99, want)
	}
	for range 100 {
		lat.add(200 * time.Millisecond) // a stall
	}
	_, p99 = r.at(1100, t0.Add(2*time.Second))
	if p99 < 200*time.Millisecond || p99 > 209*time.Millisecond {
		t.Errorf("second interval, every request 200 ms: p99 %s; the first interval's must not count", p99)
	}
	_, p99 = r.at(1100, t0.Add(2*time.Second+time.Millisecond))
	if p99 < 200*time.Millisecond {
		t.Errorf("a short interval after it: p99 %s, want the last full interval's", p99)
	}
	_, p99 = r.at(1100, t0.Add(3*time.Second))
	if p99 != 0 {
		t.Errorf("an interval in which no request ended: p99 %s, want none (0)", p99)
	}
	lat.add(time.Hour)
	if got, n := lat.next(0.99); n != 1 || got < 16*time.Second {
		t.Errorf("an hour: %s (%d), want the last bucket's bound, above 16 s", got, n)
	}
}

// quickProgress makes Progress look every 5 ms and write a plain line every
// 20 ms for the test.
func quickProgress(t *testing.T) {
	oldEvery, oldTick := progress.Every, tickEvery
	progress.Every, tickEvery = 20*time.Millisecond, 5*time.Millisecond
	t.Cleanup(func() { progress.Every, tickEvery = oldEvery, oldTick })
}
