package orderlytest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gofrs/flock"
)

// TestFreePortSkipsPortsAnotherBinaryHolds: of four free ports, three are
// reserved the way another test binary's FreePort reserves them (a lock on
// a file of their own); FreePort gives the fourth, and no port twice.
func TestFreePortSkipsPortsAnotherBinaryHolds(t *testing.T) {
	lo := freeRange(t, 4)
	dir := portsDir()
	for p := lo; p < lo+3; p++ {
		other := flock.New(filepath.Join(dir, strconv.Itoa(p)))
		if ok, err := other.TryLock(); err != nil || !ok {
			t.Fatalf("reserving %d as another binary would: %v", p, err)
		}
		t.Cleanup(func() { _ = other.Close() })
	}
	if got := freePortIn(t, lo, 4); got != lo+3 {
		t.Fatalf("FreePort gave %d, reserved by another binary; want %d", got, lo+3)
	}
	t.Run("none left", func(t *testing.T) {
		// freePortIn fails the test when no port of its range is left
		defer func() { recover() }()
		fake := &fatalRecorder{TB: t}
		freePortIn(fake, lo, 4)
		if !fake.failed {
			t.Errorf("FreePort gave a port of %d-%d twice", lo, lo+3)
		}
	})
}

// fatalRecorder records a Fatalf and stops the goroutine, as testing does.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(string, ...any) { f.failed = true; panic("fatal") }

// freeRange finds n consecutive ports below the ephemeral range that are
// free and that no binary has reserved.
func freeRange(t *testing.T, n int) int {
	dir := portsDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
next:
	for range 1000 {
		lo := portsFrom + rand.IntN(portsCount-n)
		for p := lo; p < lo+n; p++ {
			portsMu.Lock()
			given := portsGiven[p] != nil
			portsMu.Unlock()
			if given {
				continue next
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				continue next
			}
			l.Close()
			probe := flock.New(filepath.Join(dir, strconv.Itoa(p)))
			ok, err := probe.TryLock()
			_ = probe.Close()
			if err != nil || !ok {
				continue next
			}
		}
		return lo
	}
	t.Fatal("no free range")
	return 0
}
