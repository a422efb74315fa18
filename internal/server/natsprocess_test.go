package server_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestEmbeddedServerProcessDeathStopsOrderly: orderly cannot work without
// its embedded server; when the server's process dies (killed, out of
// memory), orderly reports it on Failed, for orderly serve to exit and its
// supervisor to restart it, and the restart on the same data dir answers
// every key as before.
func TestEmbeddedServerProcessDeathStopsOrderly(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.NATSProcess = natsserver.Child
	inst := orderlytest.Start(t, cfg)
	pid := inst.NATSPID()
	if pid == 0 {
		t.Fatal("no process of its own for the embedded server")
	}
	first := inst.PostOrder(t, "child-1", orderlytest.Order("c"))
	if first.Status != http.StatusCreated {
		t.Fatalf("POST: %d %s", first.Status, first.Body)
	}

	m := orderlytest.Do(t, http.MethodGet, inst.URL+"/metrics", nil)
	if !bytes.Contains(m.Body, []byte("\norderly_nats_server_process_resident_memory_bytes ")) {
		t.Fatalf("/metrics lacks the server process's memory:\n%.2000s", m.Body)
	}

	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-inst.Failed():
		if err == nil || !strings.Contains(err.Error(), "embedded NATS server process exited") {
			t.Fatalf("failed with %v, want the server's exit", err)
		}
		t.Logf("reported %s after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	case <-time.After(15 * time.Second):
		t.Fatal("orderly kept running without its NATS server")
	}
	inst.Stop(t)

	again := orderlytest.Start(t, cfg)
	r := again.PostOrder(t, "child-1", orderlytest.Order("c"))
	if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the restart: %d %s, want the replay of %d %s", r.Status, r.Body, first.Status, first.Body)
	}
}

// TestNATSPprofOnlyForAChild: the child's own profiles need a child.
func TestNATSPprofOnlyForAChild(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.NATSPprofAddr = "127.0.0.1:0"
	cfg.NATSProcess = natsserver.Child
	if err := cfg.Validate(); err != nil {
		t.Fatalf("child: %v", err)
	}
	cfg.NATSProcess = natsserver.InProcess
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pprof") {
		t.Fatalf("in process: %v, want the pprof address refused", err)
	}
}

// TestEmbeddedServerInProcess: --nats-process in-process runs the server in
// orderly's own process, with a client port for others or without; orderly
// reaches it over loopback TCP either way (nats-server's in-process pipe is
// slower under load: ADR 0016), on a port that, like every port
// of the embedded server, admits no one without a key.
func TestEmbeddedServerInProcess(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"", "127.0.0.1:-1"} {
		t.Run("listen="+listen, func(t *testing.T) {
			t.Parallel()
			cfg := orderlytest.Config(t)
			cfg.NATSProcess = natsserver.InProcess
			cfg.NATSListen = listen
			inst := orderlytest.Start(t, cfg)
			if pid := inst.NATSPID(); pid != 0 {
				t.Fatalf("the server runs in process %d, want in orderly's", pid)
			}
			if got := inst.NATSURL() != ""; got != (listen != "") {
				t.Fatalf("client URL %q with --nats-listen %q", inst.NATSURL(), listen)
			}
			own := inst.NATSConnectedURL()
			if !strings.HasPrefix(own, "nats://127.0.0.1:") {
				t.Fatalf("orderly reaches its server at %q, want a loopback port", own)
			}
			if nc, err := nats.Connect(own, nats.NoReconnect()); err == nil {
				nc.Close()
				t.Fatalf("%s admitted a client without a key", own)
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("connect without a key: %v, want an authorization violation", err)
			}
			r := inst.PostOrder(t, "in-process", orderlytest.Order("c"))
			if r.Status != http.StatusCreated {
				t.Fatalf("POST: %d %s", r.Status, r.Body)
			}
			again := inst.PostOrder(t, "in-process", orderlytest.Order("c"))
			if again.Status != http.StatusCreated || !bytes.Equal(again.Body, r.Body) {
				t.Fatalf("retry: %d %s, want %s", again.Status, again.Body, r.Body)
			}
		})
	}
}
