package orderlytest

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestNodeOutlivesTheThreadThatStartedIt: a node restarted by a goroutine
// locked to its OS thread, which then returns, so that the Go runtime ends
// the thread, is still running a second later. The kernel sends a child's
// parent-death signal when the thread that started it ends; a CI run lost
// a node 0.3 s after its start that way, when another test's --nats-process
// child server, whose goroutine had locked the same thread since, stopped.
func TestNodeOutlivesTheThreadThatStartedIt(t *testing.T) {
	t.Parallel()
	cluster := StartProcessCluster(t, ClusterPorts(t, 3))
	cluster.Kill(0)
	onThreadThatEnds(func() { cluster.Restart(0) })
	time.Sleep(time.Second)
	cluster.mu.Lock()
	exit := cluster.exits[0]
	cluster.mu.Unlock()
	if exit != "" {
		t.Fatalf("node 0 %s", exit)
	}
	cluster.waitJetStream()
}

// onThreadThatEnds runs f on a goroutine locked to its OS thread, and
// returns once it has; the runtime then ends the thread. Not on the main
// thread, which the runtime keeps (it parks it instead): a goroutine that
// lands there keeps it taken while another one runs f.
func onThreadThatEnds(f func()) {
	done := make(chan struct{})
	var try func()
	try = func() {
		runtime.LockOSThread()
		if syscall.Gettid() == os.Getpid() {
			go try()
			<-done
			runtime.UnlockOSThread()
			return
		}
		defer close(done) // returns locked: the thread ends
		f()
	}
	go try()
	<-done
	time.Sleep(100 * time.Millisecond) // for the goroutine to return
}
