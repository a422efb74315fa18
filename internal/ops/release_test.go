package ops

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestReleaserDecides(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	r := &releaser{cfg: IdleRelease{Every: time.Second, Burst: 100 * mib, Quiet: 4 * mib, Again: time.Minute}}
	t0 := time.Unix(0, 0)
	steps := []struct {
		allocs uint64 // cumulative
		at     time.Duration
		want   bool
		why    string
	}{
		{1000 * mib, 0, false, "the first look only counts"},
		{1002 * mib, time.Second, false, "quiet, but nothing to release"},
		{1060 * mib, 2 * time.Second, false, "busy"},
		{1120 * mib, 3 * time.Second, false, "busy: 118 MiB since the last release"},
		{1121 * mib, 4 * time.Second, true, "quiet after a burst"},
		{1122 * mib, 5 * time.Second, false, "quiet, released already"},
		{1123 * mib, 30 * time.Second, false, "quiet, before the window is over"},
		{1124 * mib, 64 * time.Second, true, "the window is over: once more"},
		{1125 * mib, 70 * time.Second, false, "and not again"},
		{1300 * mib, 71 * time.Second, false, "a second burst"},
		{1301 * mib, 72 * time.Second, true, "quiet after it"},
		{1500 * mib, 73 * time.Second, false, "a third burst before the window is over"},
		{1501 * mib, 74 * time.Second, true, "quiet after it: the window starts again"},
		{1502 * mib, 133 * time.Second, false, "the first window would be over"},
		{1503 * mib, 134 * time.Second, true, "the third burst's window is over"},
	}
	for _, s := range steps {
		if got := r.look(s.allocs, t0.Add(s.at)); got != s.want {
			t.Fatalf("at %s (%s): release = %v, want %v", s.at, s.why, got, s.want)
		}
	}
}

// TestIdleReleaseReturnsMemory: after a burst of garbage and a quiet
// interval, the heap's free memory is with the operating system.
func TestIdleReleaseReturnsMemory(t *testing.T) {
	// Not parallel: it reads the process's own heap.
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go IdleRelease{Every: 100 * time.Millisecond, Burst: 128 << 20, Quiet: 8 << 20}.Run(ctx, slog.New(slog.DiscardHandler))
	time.Sleep(150 * time.Millisecond)
	var keep [][]byte
	for range 256 { // 256 MiB, live until the burst is over
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.KeepAlive(keep)
	keep = nil
	before := released()
	deadline := time.Now().Add(5 * time.Second)
	for released() < before+128<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("released %d MiB of the burst's 256 within 5 s", (released()-before)>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
