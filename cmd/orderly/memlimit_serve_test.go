package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestServeTakesItsContainersMemoryLimit runs orderly serve in a memory
// cgroup of its own with a limit of 600 MiB, as a container runtime would
// (cgroup v1 or v2, which needs root and a writable cgroup file system),
// and wants 90% of it as the runtime's limit. Without it, 140,000 orders
// in a burst took serve past that limit and the kernel killed it
// (docs/operations.md). With its NATS server in a child process the two
// processes share the container: orderly's takes a quarter of the 90% and
// the child three quarters (each took 90% before, 180% of the container
// together).
func TestServeTakesItsContainersMemoryLimit(t *testing.T) {
	t.Parallel()
	const container = 600 << 20
	for _, tc := range []struct {
		process     string
		own, server int64 // the runtimes' limits; 0: not a process of its own
	}{
		{"in-process", container * 9 / 10, 0},
		{"child", container / 4 * 9 / 10, container / 4 * 9 / 10 * 3},
	} {
		t.Run(tc.process, func(t *testing.T) {
			t.Parallel()
			dir, enter := memoryCgroup(t, container)
			if dir == "" {
				t.Skip("no writable memory cgroup here (not root, or no cgroup file system); TestMemoryLimit covers the logic")
			}
			bin := orderlytest.BuildOrderly(t)
			args, url := serveArgs(t, filepath.Join(t.TempDir(), "data"))
			// The child's log line with its limit is at debug level.
			args = append([]string{"--log-level", "debug"}, append(args, "--nats-process", tc.process)...)
			var log orderlytest.Buffer
			cmd := exec.Command("sh", append([]string{"-c", "echo $$ > " + enter + ` && exec "$0" "$@"`, bin}, args...)...)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
				return strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "AUTOMEMLIMIT=") ||
					strings.HasPrefix(kv, "ORDERLY_MEMORY_LIMIT=") || strings.HasPrefix(kv, "ORDERLY_NATS_PROCESS=")
			})
			cmd.Stdout, cmd.Stderr = &log, &log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("serve's output:\n%s", log.String())
				}
			})
			orderlytest.Eventually(t, 20*time.Second, "serve to be ready", func() bool {
				r, err := orderlytest.TryDo("GET", url+"/readyz", nil)
				return err == nil && r.Status == 200
			})
			// The runtime's own figure, from /metrics, and the log's.
			r := orderlytest.Do(t, "GET", url+"/metrics", nil)
			if !strings.Contains(string(r.Body), "\ngo_gc_gomemlimit_bytes "+strconv.FormatFloat(float64(tc.own), 'g', -1, 64)+"\n") {
				line := regexp.MustCompile(`\ngo_gc_gomemlimit_bytes [^\n]*`).FindString(string(r.Body))
				t.Errorf("orderly's memory limit is %q, want %d", strings.TrimSpace(line), tc.own)
			}
			if !strings.Contains(log.String(), "the container's limit of 600 MiB") {
				t.Errorf("serve's log does not say where its memory limit comes from")
			}
			if tc.server != 0 {
				// The child says what its runtime took.
				want := "memory_limit=" + strconv.FormatInt(tc.server, 10)
				if !strings.Contains(log.String(), want) {
					t.Errorf("the NATS server's process does not log %s", want)
				}
				if tc.own+tc.server > container*9/10 {
					t.Errorf("the two limits add up to %d, more than 90%% of the container's %d", tc.own+tc.server, container)
				}
			}
		})
	}
}

// memoryCgroup makes a memory cgroup with limit for the test, removed at
// its end, and returns its directory and the file a process writes its
// PID to in order to enter it; "" when none can be made here.
func memoryCgroup(t *testing.T, limit int64) (dir, procs string) {
	name := "orderly-test-" + strconv.Itoa(os.Getpid()) + "-" + strings.ReplaceAll(t.Name(), "/", "_")
	for _, c := range []struct{ parent, limitFile string }{
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"}, // v1
		{"/sys/fs/cgroup", "memory.max"},                   // v2, with the memory controller enabled for children
	} {
		dir := filepath.Join(c.parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, c.limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			os.Remove(dir)
			continue
		}
		procs := filepath.Join(dir, "cgroup.procs")
		if err := exec.Command("sh", "-c", "echo $$ > "+procs).Run(); err != nil {
			os.Remove(dir) // a process may not enter it (cgroup v2's rules, a container's)
			continue
		}
		t.Cleanup(func() {
			// The processes in it have ended by now (cleanups run last first).
			for i := 0; i < 50 && os.Remove(dir) != nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
		})
		return dir, procs
	}
	return "", ""
}
