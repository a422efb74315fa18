package main

import (
	"errors"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestMemoryLimit: --memory-limit auto (the default) gives the Go runtime
// 90% of the container's memory limit, unless GOMEMLIMIT sets one; without
// a container limit there is none; off and a size say it themselves. With
// serve's NATS server in a child process (share 1/4) orderly's process takes
// a quarter of that and the child the rest: together they stay under it.
func TestMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("AUTOMEMLIMIT", "") // empty is unset
	logger := orderlytest.Logger()
	const gib = 1 << 30
	container := func(limit uint64, err error) (memlimit.Provider, *int) {
		calls := 0
		return func() (uint64, error) { calls++; return limit, err }, &calls
	}
	cases := []struct {
		flag     string
		share    float64
		limit    uint64
		err      error
		want     int64
		wantFrom string
	}{
		{"auto", 1, gib, nil, gib * 9 / 10, "the container's limit of 1.0 GiB"},
		{"", 1, 600 << 20, nil, 600 << 20 * 9 / 10, "the container's limit of 600 MiB"},
		{"auto", 1, 0, memlimit.ErrNoLimit, math.MaxInt64, "no container memory limit"},
		{"auto", 1, 0, errors.New("no cgroup file system"), math.MaxInt64, "no container memory limit found"},
		{"off", 1, gib, nil, math.MaxInt64, "off"},
		{"300MiB", 1, gib, nil, 300 << 20, "--memory-limit"},
		{"auto", childShare, gib, nil, gib / 4 * 9 / 10, "the container's limit of 1.0 GiB"},
		{"auto", childShare, 0, memlimit.ErrNoLimit, math.MaxInt64, "no container memory limit"},
		{"off", childShare, gib, nil, math.MaxInt64, "off"},
		{"400MiB", childShare, gib, nil, 100 << 20, "--memory-limit"},
	}
	for _, tc := range cases {
		debug.SetMemoryLimit(math.MaxInt64)
		provider, _ := container(tc.limit, tc.err)
		got, from, err := applyMemoryLimit(tc.flag, tc.share, provider, nil, logger)
		if err != nil || got != tc.want || from != tc.wantFrom || debug.SetMemoryLimit(-1) != tc.want {
			t.Errorf("%q, share %g, with a container limit of %d (%v): %d from %q, %v (runtime: %d); want %d from %q",
				tc.flag, tc.share, tc.limit, tc.err, got, from, err, debug.SetMemoryLimit(-1), tc.want, tc.wantFrom)
		}
		if tc.share < 1 {
			child := childMemoryLimit(got)
			switch {
			case got == math.MaxInt64 && child != math.MaxInt64:
				t.Errorf("%q without a limit: the child's is %d, want none", tc.flag, child)
			case got != math.MaxInt64 && child != 3*got:
				t.Errorf("%q: orderly's process %d, the child %d; want three times as much", tc.flag, got, child)
			}
		}
	}
	if _, _, err := applyMemoryLimit("lots", 1, nil, nil, logger); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Errorf("an unreadable size: %v", err)
	}
	for _, tiny := range []string{"1B", "10MiB", "67108863"} {
		if _, _, err := applyMemoryLimit(tiny, 1, nil, nil, logger); err == nil || !strings.Contains(err.Error(), "below 64 MiB") {
			t.Errorf("--memory-limit %s: %v, want a refusal", tiny, err)
		}
	}
	if got, _, err := applyMemoryLimit("64MiB", 1, nil, nil, logger); err != nil || got != 64<<20 {
		t.Errorf("--memory-limit 64MiB: %d, %v", got, err)
	}

	// GOMEMLIMIT is the operator's: auto leaves the limit it set alone.
	t.Setenv("GOMEMLIMIT", "2GiB")
	debug.SetMemoryLimit(2 * gib)
	provider, calls := container(gib, nil)
	if got, from, err := applyMemoryLimit("auto", 1, provider, nil, logger); err != nil || got != 2*gib || from != "GOMEMLIMIT=2GiB" || *calls != 0 {
		t.Errorf("auto under GOMEMLIMIT=2GiB: %d from %q, %v, the container asked %d times", got, from, err, *calls)
	}
	// With the child, GOMEMLIMIT is what the two share.
	if got, from, err := applyMemoryLimit("auto", childShare, provider, nil, logger); err != nil || got != gib/2 || from != "GOMEMLIMIT=2GiB" || childMemoryLimit(got) != 3*gib/2 {
		t.Errorf("auto under GOMEMLIMIT=2GiB with the child: %d (the child %d) from %q, %v", got, childMemoryLimit(got), from, err)
	}
	// A GOMEMLIMIT below what --memory-limit takes is refused as that is.
	t.Setenv("GOMEMLIMIT", "1MiB")
	debug.SetMemoryLimit(1 << 20)
	if _, _, err := applyMemoryLimit("auto", 1, provider, nil, logger); err == nil || !strings.Contains(err.Error(), "GOMEMLIMIT=1MiB: below 64 MiB") {
		t.Errorf("auto under GOMEMLIMIT=1MiB: %v, want a refusal", err)
	}
	// off overrides it, as it overrides any GOMEMLIMIT.
	if got, _, err := applyMemoryLimit("off", 1, provider, nil, logger); err != nil || got != math.MaxInt64 {
		t.Errorf("off under GOMEMLIMIT=1MiB: %d, %v", got, err)
	}
}
