package ops

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// MemoryAvailable is how much more memory the processes of this one's
// control group may take before the kernel reclaims or kills: the host's
// MemAvailable, or less when a cgroup v2 memory limit (a container's) is
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

// cgroupLeft is memory.max minus memory.current of this process's cgroup v2;
// limited is false without one (no limit, or not Linux). The limits of
// cgroup v1's memory controller are not read.
func cgroupLeft(root string) (left uint64, limited bool, err error) {
	b, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup"))
	if err != nil {
		return 0, false, nil
	}
	var path string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok { // the v2 hierarchy
			path = p
		}
	}
	if path == "" || strings.Contains(path, "..") {
		return 0, false, nil
	}
	dir := filepath.Join(root, "sys", "fs", "cgroup", filepath.Clean("/"+path))
	maxB, err := os.ReadFile(filepath.Join(dir, "memory.max"))
	if err != nil || strings.TrimSpace(string(maxB)) == "max" {
		return 0, false, nil // no memory controller here, or no limit
	}
	limit, err := strconv.ParseUint(strings.TrimSpace(string(maxB)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", filepath.Join(dir, "memory.max"), err)
	}
	cur, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, false, err
	}
	used, err := strconv.ParseUint(strings.TrimSpace(string(cur)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", filepath.Join(dir, "memory.current"), err)
	}
	if used >= limit {
		return 0, true, nil
	}
	return limit - used, true, nil
}

// MemoryCollector is the gauge orderly_memory_available_bytes, read at each
// scrape; nil where MemoryAvailable cannot be read (not Linux).
func MemoryCollector() prometheus.Collector {
	if _, err := MemoryAvailable("/"); err != nil {
		return nil
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "orderly_memory_available_bytes",
		Help: "Memory this process's host, or its container's limit when closer, can still give: MemAvailable, or memory.max - memory.current of the cgroup.",
	}, func() float64 {
		n, err := MemoryAvailable("/")
		if err != nil {
			return -1
		}
		return float64(n)
	})
}
