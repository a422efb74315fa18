package jsstore

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestWriteHealth: a write that failed for want of NATS makes Check fail
// until a write succeeds, Forget passes, or the connection is made again (the
// failure was the old connection's); a failure after the reconnect counts.
func TestWriteHealth(t *testing.T) {
	h := &WriteHealth{Forget: time.Minute}
	if err := h.Check(t.Context()); err != nil {
		t.Fatalf("nothing written: %v", err)
	}
	h.record(nats.ErrTimeout)
	if h.Check(t.Context()) == nil {
		t.Fatal("a failed write is not reported")
	}
	h.record(nil)
	if err := h.Check(t.Context()); err != nil {
		t.Fatalf("a write succeeded after the failure: %v", err)
	}
	h.record(nats.ErrNoResponders)
	h.reconnected(time.Now())
	if err := h.Check(t.Context()); err != nil {
		t.Fatalf("the connection was made again after the failure: %v", err)
	}
	time.Sleep(time.Millisecond)
	h.record(nats.ErrTimeout)
	if h.Check(t.Context()) == nil {
		t.Fatal("a failure after the reconnect is not reported")
	}
	h.reconnected(time.Now().Add(-time.Second)) // a reconnect before that failure
	if h.Check(t.Context()) == nil {
		t.Fatal("a reconnect before the failure cleared it")
	}
	h.record(&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence})
	if h.Check(t.Context()) == nil {
		t.Fatal("an answer of NATS (a wrong last sequence, not a fault of the store) cleared the failure")
	}
}
