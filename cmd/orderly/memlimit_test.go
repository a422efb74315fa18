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
// a container limit there is none; off and a size say it themselves.
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
		limit    uint64
		err      error
		want     int64
		wantFrom string
	}{
		{"auto", gib, nil, gib * 9 / 10, "the container's limit of 1.0 GiB"},
		{"", 600 << 20, nil, 600 << 20 * 9 / 10, "the container's limit of 600 MiB"},
		{"auto", 0, memlimit.ErrNoLimit, math.MaxInt64, "no container memory limit"},
		{"auto", 0, errors.New("no cgroup file system"), math.MaxInt64, "no container memory limit found"},
		{"off", gib, nil, math.MaxInt64, "off"},
		{"300MiB", gib, nil, 300 << 20, "--memory-limit"},
	}
	for _, tc := range cases {
		debug.SetMemoryLimit(math.MaxInt64)
		provider, _ := container(tc.limit, tc.err)
		got, from, err := applyMemoryLimit(tc.flag, provider, nil, logger)
		if err != nil || got != tc.want || from != tc.wantFrom || debug.SetMemoryLimit(-1) != tc.want {
			t.Errorf("%q with a container limit of %d (%v): %d from %q, %v (runtime: %d); want %d from %q",
				tc.flag, tc.limit, tc.err, got, from, err, debug.SetMemoryLimit(-1), tc.want, tc.wantFrom)
		}
	}
	if _, _, err := applyMemoryLimit("lots", nil, nil, logger); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Errorf("an unreadable size: %v", err)
	}

	// GOMEMLIMIT is the operator's: auto leaves the limit it set alone.
	t.Setenv("GOMEMLIMIT", "2GiB")
	debug.SetMemoryLimit(2 * gib)
	provider, calls := container(gib, nil)
	if got, from, err := applyMemoryLimit("auto", provider, nil, logger); err != nil || got != 2*gib || from != "GOMEMLIMIT=2GiB" || *calls != 0 {
		t.Errorf("auto under GOMEMLIMIT=2GiB: %d from %q, %v, the container asked %d times", got, from, err, *calls)
	}
}
