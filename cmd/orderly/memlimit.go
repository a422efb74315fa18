package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/dustin/go-humanize"
)

// memoryLimitRatio is the share of a container's memory limit that
// --memory-limit auto gives the Go runtime: the rest is for what the Go
// runtime does not count (the binary, the kernel's page cache of the store
// is reclaimable) and for the time the collector takes to catch up.
const memoryLimitRatio = 0.9

// memoryLimitRefresh is how often auto reads the container's limit again
// (it may be resized while orderly runs).
const memoryLimitRefresh = time.Minute

// applyMemoryLimit sets the Go runtime's soft memory limit from
// --memory-limit and returns it (math.MaxInt64 for none) and where it came
// from, for the log:
//
//   - "auto" (the default): 90% of the memory limit of the process's control
//     group (a container's, cgroup v1 or v2) when it has one, unless the
//     GOMEMLIMIT environment variable sets the limit; none otherwise. Without
//     it a burst of orders grows nats-server's caches and the collector's
//     garbage past a container's limit, and the kernel kills the process
//     (docs/operations.md). cgroup reads the container's limit (tests give
//     their own); refresh, when not nil, keeps reading it until it ends.
//   - "off": no limit, also when GOMEMLIMIT sets one.
//   - a size such as 400MiB: that limit.
//
// share is this process's part of the limit: 1, or childShare when serve's
// embedded NATS server runs in a child process in the same container and
// takes the rest (childMemoryLimit).
func applyMemoryLimit(flag string, share float64, cgroup memlimit.Provider, refresh context.Context, logger *slog.Logger) (int64, string, error) {
	part := func(n int64) int64 {
		if share >= 1 || n == math.MaxInt64 {
			return n
		}
		return int64(float64(n) * share)
	}
	switch strings.ToLower(strings.TrimSpace(flag)) {
	case "", "auto":
		if v := os.Getenv("GOMEMLIMIT"); v != "" {
			set := debug.SetMemoryLimit(-1)
			if set < minMemoryLimit {
				return 0, "", fmt.Errorf("GOMEMLIMIT=%s: %s", v, tooLittleMemory)
			}
			return setMemoryLimit(part(set)), "GOMEMLIMIT=" + v, nil
		}
		limit, err := cgroup()
		if errors.Is(err, memlimit.ErrNoLimit) {
			return debug.SetMemoryLimit(-1), "no container memory limit", nil
		}
		if err != nil {
			// Not in a cgroup that says (not Linux, no cgroup file system):
			// the same as no limit, and worth a line at debug level.
			logger.Debug("no container memory limit found", "err", err)
			return debug.SetMemoryLimit(-1), "no container memory limit found", nil
		}
		provider := func() (uint64, error) {
			n, err := cgroup()
			return uint64(part(int64(n))), err
		}
		opts := []memlimit.Option{memlimit.WithProvider(provider), memlimit.WithRatio(memoryLimitRatio),
			memlimit.WithLogger(logger.With("component", "memory-limit"))}
		if refresh != nil {
			opts = append(opts, memlimit.WithRefreshInterval(refresh, memoryLimitRefresh))
		}
		// memlimit.Set also honours AUTOMEMLIMIT (a ratio, or off), and
		// refuses it empty: empty is unset, as for GOMEMLIMIT.
		if v, ok := os.LookupEnv("AUTOMEMLIMIT"); ok && strings.TrimSpace(v) == "" {
			os.Unsetenv("AUTOMEMLIMIT")
		}
		set, err := memlimit.Set(opts...)
		if err != nil {
			return set, "", fmt.Errorf("--memory-limit auto: %w", err)
		}
		if set == math.MaxInt64 {
			return set, "AUTOMEMLIMIT=" + os.Getenv("AUTOMEMLIMIT"), nil
		}
		return set, "the container's limit of " + humanize.IBytes(limit), nil
	case "off", "none":
		debug.SetMemoryLimit(math.MaxInt64)
		return math.MaxInt64, "off", nil
	}
	n, err := parseBytes(flag)
	if err != nil {
		return 0, "", fmt.Errorf("--memory-limit %q: want auto, off or a size such as 512MiB", flag)
	}
	if n < minMemoryLimit {
		return 0, "", fmt.Errorf("--memory-limit %s: %s", flag, tooLittleMemory)
	}
	return setMemoryLimit(part(n)), "--memory-limit", nil
}

// minMemoryLimit is the least --memory-limit taken. --memory-limit=1B was:
// orderly bench -d 5s against it made 1,682 req/s at a p99 of 74.6 ms,
// against 4,282 req/s and 37.3 ms without a limit (2026-12-07).
const minMemoryLimit = 64 << 20

// tooLittleMemory is why a limit below minMemoryLimit is refused, from
// --memory-limit or from GOMEMLIMIT (which the Go runtime applies before
// orderly starts, and auto would keep).
var tooLittleMemory = "below " + humanize.IBytes(minMemoryLimit) + ", which orderly does not work in (idle it holds about 5 MiB of heap and 60 MiB of RSS; under a soft limit that low the garbage collector runs without pause, and orderly serves at a fraction of its rate)"

func setMemoryLimit(n int64) int64 {
	debug.SetMemoryLimit(n)
	return n
}

// childShare is the part of serve's memory limit that orderly's own process
// takes when its embedded NATS server runs in a child process: both live in
// the same container, and the server holds the store's caches and index
// (after a million orders orderly's process held 52-73 MiB of RSS, the
// server's 300-1,015 MiB: docs/performance.md, "Memory").
const childShare = 0.25

// childMemoryLimit is the soft limit of the embedded server's child process
// when orderly's own is parent (a quarter of the whole): the other three
// quarters, or none when parent is none.
func childMemoryLimit(parent int64) int64 {
	if parent == math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(float64(parent) * (1 - childShare) / childShare)
}

// humanLimit is a memory limit for the log: a size, or none.
func humanLimit(n int64) string {
	if n == math.MaxInt64 {
		return "none"
	}
	return humanize.IBytes(uint64(n))
}
