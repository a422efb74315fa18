package ops

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeRoot writes a proc/ and sys/ tree: meminfo with MemAvailable avail
// kB, and, when limit is not "", the process in cgroup v2 group /app with
// memory.max limit and memory.current current; in v1's memory controller,
// group /v1/path, without a limit unless v1 writes one.
func fakeRoot(t *testing.T, avail, limit, current string, v1 ...string) string {
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
	v1Limit, v1Usage := "9223372036854771712", "5000"
	if len(v1) == 2 {
		v1Limit, v1Usage = v1[0], v1[1]
	}
	write("sys/fs/cgroup/memory/v1/path/memory.limit_in_bytes", v1Limit+"\n")
	write("sys/fs/cgroup/memory/v1/path/memory.usage_in_bytes", v1Usage+"\n")
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
	if got, err := MemoryAvailable(fakeRoot(t, "2000000", "", "", "1073741824", "1000000000")); err != nil || got != 73741824 {
		t.Errorf("a cgroup v1 limit: %d, %v; want 73741824", got, err)
	}
	if got, err := MemoryAvailable(fakeRoot(t, "2000000", "1073741824", "1000", "1073741824", "1000000000")); err != nil || got != 73741824 {
		t.Errorf("v1 and v2 limits: %d, %v; want the smaller, 73741824", got, err)
	}
	if _, err := MemoryAvailable(fakeRoot(t, "2000000", "lots", "0")); err == nil {
		t.Error("a memory.max that is not a number: no error")
	}
	if _, err := MemoryAvailable(t.TempDir()); err == nil {
		t.Error("no meminfo: no error")
	}
}
