package ops

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// MemoryAvailable is how much more memory the processes of this one's
// control group may take before the kernel reclaims or kills: the host's
// MemAvailable, or less when a cgroup memory limit (a container's) is
// closer. root is the file system root ("/"; tests give a directory that
// holds proc/ and sys/). An embedded store's subject index grows with the
// events it retains (docs/operations.md, memory per retained order), so
// this is what the alert OrderlyMemoryRunningOut compares that growth to.
func MemoryAvailable(root string) (uint64, error) {
	fs, err := procfs.NewFS(filepath.Join(root, "proc"))
	if err != nil {
		return 0, err
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, err
	}
	if mi.MemAvailableBytes == nil {
		return 0, errors.New("meminfo has no MemAvailable (a kernel before 3.14)")
	}
	avail := *mi.MemAvailableBytes
	if left, limited, err := cgroupLeft(root); err != nil {
		return 0, err
	} else if limited && left < avail {
		avail = left
	}
	return avail, nil
}

// cgroupLeft is what this process's cgroup memory limit leaves: v2's
// memory.max minus memory.current, or v1's memory.limit_in_bytes minus
// memory.usage_in_bytes; limited is false without a limit (or not Linux).
func cgroupLeft(root string) (left uint64, limited bool, err error) {
	b, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup"))
	if err != nil {
		return 0, false, nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		var dir, limitFile, usageFile string
		if p, ok := strings.CutPrefix(line, "0::"); ok { // the v2 hierarchy
			dir, limitFile, usageFile = filepath.Join(root, "sys", "fs", "cgroup", cleanPath(p)), "memory.max", "memory.current"
		} else if _, p, ok := strings.Cut(line, ":memory:"); ok { // v1's memory controller
			dir, limitFile, usageFile = filepath.Join(root, "sys", "fs", "cgroup", "memory", cleanPath(p)), "memory.limit_in_bytes", "memory.usage_in_bytes"
		} else {
			continue
		}
		l, ok, err := limitLeft(filepath.Join(dir, limitFile), filepath.Join(dir, usageFile))
		if err != nil {
			return 0, false, err
		}
		if ok && (!limited || l < left) {
			left, limited = l, true
		}
	}
	return left, limited, nil
}

// cleanPath keeps a cgroup path inside the cgroup file system.
func cleanPath(p string) string { return filepath.Clean("/" + p) }

// unlimitedV1 is where cgroup v1 says "no limit": a page-aligned MaxInt64,
// or anything near it.
const unlimitedV1 = 1 << 62

// limitLeft reads a limit and a usage file; ok is false when the limit file
// is missing (no such controller there) or says there is no limit.
func limitLeft(limitPath, usagePath string) (left uint64, ok bool, err error) {
	lb, err := os.ReadFile(limitPath)
	if err != nil || strings.TrimSpace(string(lb)) == "max" {
		return 0, false, nil
	}
	limit, err := strconv.ParseUint(strings.TrimSpace(string(lb)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", limitPath, err)
	}
	if limit >= unlimitedV1 {
		return 0, false, nil
	}
	ub, err := os.ReadFile(usagePath)
	if err != nil {
		return 0, false, err
	}
	used, err := strconv.ParseUint(strings.TrimSpace(string(ub)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", usagePath, err)
	}
	return limit - min(used, limit), true, nil
}

// MemoryCollector is the gauge orderly_memory_available_bytes, read at each
// scrape; nil where MemoryAvailable cannot be read (not Linux).
func MemoryCollector() prometheus.Collector {
	if _, err := MemoryAvailable("/"); err != nil {
		return nil
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "orderly_memory_available_bytes",
		Help: "Memory this process's host, or its container's limit when closer, can still give: MemAvailable, or what the cgroup's memory limit leaves (v2 memory.max - memory.current, v1 memory.limit_in_bytes - memory.usage_in_bytes).",
	}, func() float64 {
		n, err := MemoryAvailable("/")
		if err != nil {
			return math.NaN() // compares false: no alert on a reading that failed
		}
		return float64(n)
	})
}
