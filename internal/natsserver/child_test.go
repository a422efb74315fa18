package natsserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// parentEnv makes the test binary a parent that starts a child on the store
// the variable names, prints the child's PID, and waits to be killed.
const parentEnv = "ORDERLY_TEST_CHILD_PARENT"

func TestMain(m *testing.M) {
	natsserver.RunChildIfAsked()
	if dir := os.Getenv(parentEnv); dir != "" {
		c, err := natsserver.StartChild(context.Background(), testConfig(dir), "")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(c.PID())
		select {}
	}
	os.Exit(m.Run())
}

func testConfig(dir string) natsserver.Config {
	return natsserver.Config{ServerName: "child-test", StoreDir: dir, Fsync: natsserver.Fsync{Interval: time.Second}}
}

func startChild(t *testing.T, cfg natsserver.Config) *natsserver.ChildProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := natsserver.StartChild(ctx, cfg, "")
	if err != nil {
		t.Fatalf("start the child: %v", err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	if !orderlytest.Exited(pid, within) {
		t.Fatalf("process %d still runs after %s", pid, within)
	}
}

// TestChildServesJetStreamAndStops: the child serves JetStream on a loopback
// port of its own, logs through the parent's logger, and stops when the
// parent shuts it down, releasing the store.
func TestChildServesJetStreamAndStops(t *testing.T) {
	t.Parallel()
	var logs orderlytest.Buffer
	cfg := testConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.MemoryLimit = 300 << 20
	cfg.PprofAddr = "127.0.0.1:0"
	c := startChild(t, cfg)
	if c.PID() == os.Getpid() || !orderlytest.Running(c.PID()) {
		t.Fatalf("child PID %d is not a running process of its own", c.PID())
	}
	if !strings.HasPrefix(c.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("client URL %q, want a loopback port", c.ClientURL())
	}
	nc, err := nats.Connect(c.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "component=nats-server") || !strings.Contains(logs.String(), "Server is ready") {
		t.Fatalf("the child's log did not reach the parent's logger:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "memory_limit=314572800") {
		t.Fatalf("the child did not take its memory limit:\n%s", logs.String())
	}

	// The profiles served are the child's own.
	m := regexp.MustCompile(`msg="pprof of the embedded NATS server's process listening".* addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no pprof address in the child's log:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + m[1] + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	cmdline, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(cmdline, []byte(natsserver.ChildArg)) {
		t.Fatalf("pprof's command line %q is not the child's", cmdline)
	}

	pid := c.PID()
	c.Shutdown()
	select {
	case <-c.Done():
	default:
		t.Fatal("Shutdown returned before the child exited")
	}
	waitGone(t, pid, 5*time.Second)
	lock := flock.New(filepath.Join(cfg.StoreDir, natsserver.LockFile))
	if ok, err := lock.TryLock(); err != nil || !ok {
		t.Fatalf("the store is still locked after the child stopped: %v", err)
	}
	_ = lock.Close()
}

// TestChildExitIsReported: a child that dies closes Done, and Err says so
// with its last words.
func TestChildExitIsReported(t *testing.T) {
	t.Parallel()
	c := startChild(t, testConfig(t.TempDir()))
	if err := syscall.Kill(c.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the child was killed")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "process exited") || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Err = %v, want the child's exit", err)
	}
}

// TestChildIgnoresTerminalSignals: a Ctrl-C reaches the whole process group;
// the child leaves it to the parent, which stops it after its own graceful
// shutdown.
func TestChildIgnoresTerminalSignals(t *testing.T) {
	t.Parallel()
	c := startChild(t, testConfig(t.TempDir()))
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if err := syscall.Kill(c.PID(), sig); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-c.Done():
		t.Fatalf("the child stopped on a signal: %v", c.Err())
	case <-time.After(time.Second):
	}
	nc, err := nats.Connect(c.ClientURL())
	if err != nil {
		t.Fatalf("the child no longer serves after SIGINT and SIGTERM: %v", err)
	}
	nc.Close()
}

// TestChildDiesWithItsParent: kill -9 of the parent takes the child with it
// (it must not hold the store, or the port, for the restarted orderly), and
// a new child serves the same store.
func TestChildDiesWithItsParent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), parentEnv+"="+dir)
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = parent.Process.Kill()
		t.Fatalf("the parent did not start its child: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || !orderlytest.Running(child) {
		_ = parent.Process.Kill()
		t.Fatalf("child PID %q not running: %v", line, err)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitGone(t, child, 10*time.Second)

	c := startChild(t, testConfig(dir))
	if nc, err := nats.Connect(c.ClientURL()); err != nil {
		t.Fatalf("a new child does not serve the store: %v", err)
	} else {
		nc.Close()
	}
}

// TestChildWaitsForTheStore: a child does not open a store another server
// process holds (a killed parent's child that is still dying): it waits,
// and gives up with the parent's deadline.
func TestChildWaitsForTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lock := flock.New(filepath.Join(dir, natsserver.LockFile))
	if ok, err := lock.TryLock(); err != nil || !ok {
		t.Fatalf("lock: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, err := natsserver.StartChild(ctx, testConfig(dir), ""); err == nil {
		c.Shutdown()
		t.Fatal("a child served a store another process holds")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline while the child waits", err)
	}
	// Released while a child waits: it takes the store.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	go func() { time.Sleep(500 * time.Millisecond); _ = lock.Unlock() }()
	c, err := natsserver.StartChild(ctx2, testConfig(dir), "")
	if err != nil {
		t.Fatalf("the child did not take the released store: %v", err)
	}
	c.Shutdown()
}

// TestChildRefusesWithoutTheHook: a program started as a child that did not
// call RunChildIfAsked must not start children of its own.
func TestChildRefusesWithoutTheHook(t *testing.T) {
	t.Setenv(natsserver.ChildEnv, "1")
	if _, err := natsserver.StartChild(context.Background(), testConfig(t.TempDir()), ""); err == nil || !strings.Contains(err.Error(), "RunChildIfAsked") {
		t.Fatalf("err = %v", err)
	}
}
