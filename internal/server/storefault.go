package server

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// unboundedStore is the embedded server's JetStream storage limit when the
// disk guard bounds writes instead (1 PiB).
const unboundedStore = 1 << 50

// storeFault remembers the first critical error of the embedded store: after
// one, nats-server writes nothing more to that stream (or runs without
// JetStream) until it is restarted (docs/nats-facts.md, fact 6).
type storeFault struct {
	mu     sync.Mutex
	since  time.Time
	msg    string
	done   chan struct{}
	closed bool
}

// observe reads an error the embedded server logged.
func (f *storeFault) observe(msg string) {
	if !strings.Contains(msg, "Critical write error") && !strings.Contains(msg, "will be DISABLED") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		f.since, f.msg = time.Now(), msg
	}
}

// err is the fault, for readiness.
func (f *storeFault) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		return nil
	}
	return fmt.Errorf("the embedded store stopped writing at %s (%s); it writes again only after a restart of orderly, once the cause is fixed",
		f.since.UTC().Format(time.RFC3339), f.msg)
}

// dead is the fault once it has lasted grace, for liveness.
func (f *storeFault) dead(grace time.Duration) error {
	f.mu.Lock()
	since := f.since
	f.mu.Unlock()
	if since.IsZero() || time.Since(since) < grace {
		return nil
	}
	return f.err()
}

func (f *storeFault) stopped() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

func (f *storeFault) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
	}
	if !f.closed {
		close(f.done)
		f.closed = true
	}
}

// watchStore reports a store fault that outlived the grace period on
// Failed, once: the process cannot recover on its own.
func (s *Server) watchStore() {
	s.every(250*time.Millisecond, func() bool {
		err := s.fault.dead(s.cfg.StoreFaultGrace)
		if err == nil {
			return true
		}
		s.logger.Error("store fault outlived the grace period: stopping so that a supervisor restarts orderly", "grace", s.cfg.StoreFaultGrace, "err", err)
		select {
		case s.failed <- err:
		default:
		}
		return false
	})
}

// watchServer reports on Failed an embedded server that stopped on its own
// (its process died): orderly cannot work without it, and its supervisor
// restarts both.
func (s *Server) watchServer() {
	defer s.wg.Done()
	select {
	case <-s.ns.Done():
	case <-s.fault.stopped():
		return
	}
	if s.stopping.Load() {
		return
	}
	err := s.ns.Err()
	s.logger.Error("the embedded NATS server stopped: stopping so that a supervisor restarts orderly", "err", err)
	select {
	case s.failed <- err:
	default:
	}
}
