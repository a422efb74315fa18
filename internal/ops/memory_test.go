package ops

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeRoot writes a proc/ and sys/ tree: meminfo with MemAvailable avail
// kB, and, when limit is not "", the process in cgroup v2 group /app with
// memory.max limit and memory.current current.
func fakeRoot(t *testing.T, avail, limit, current string) string {
	t.Helper()
	root := t.TempDir()
	write := func(path, data string) {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/meminfo", "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:   "+avail+" kB\n")
	write("proc/self/cgroup", "4:memory:/v1/path\n0::/app\n")
	if limit != "" {
		write("sys/fs/cgroup/app/memory.max", limit+"\n")
		write("sys/fs/cgroup/app/memory.current", current+"\n")
	}
	return root
}

// TestMemoryAvailable: what the host has available, or what is left under
// the container's limit when that is less.
func TestMemoryAvailable(t *testing.T) {
	for _, c := range []struct {
		name                  string
		avail, limit, current string
		want                  uint64
	}{
		{"no cgroup limit", "2000000", "", "", 2000000 * 1024},
		{"no limit: max", "2000000", "max", "0", 2000000 * 1024},
		{"a limit closer than the host's memory", "2000000", "1073741824", "536870912", 536870912},
		{"a limit farther than the host's memory", "1000", "1073741824", "0", 1000 * 1024},
		{"at the limit", "2000000", "1073741824", "1073741825", 0},
	} {
		got, err := MemoryAvailable(fakeRoot(t, c.avail, c.limit, c.current))
		if err != nil || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	if _, err := MemoryAvailable(fakeRoot(t, "2000000", "lots", "0")); err == nil {
		t.Error("a memory.max that is not a number: no error")
	}
	if _, err := MemoryAvailable(t.TempDir()); err == nil {
		t.Error("no meminfo: no error")
	}
}
