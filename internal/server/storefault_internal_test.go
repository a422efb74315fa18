package server

import (
	"strings"
	"testing"
	"time"
)

// TestStoreFault: of what the embedded server logs, the two errors after
// which it writes no more (a stream's or the Raft log's write error, and
// JetStream disabled for lack of resources) are the fault, the first one
// kept; readiness fails at once, liveness only once the grace has passed.
func TestStoreFault(t *testing.T) {
	for _, msg := range []string{
		"Filestore [ORDER_COMMANDS] Critical write error: write 1.blk: no space left on device",
		"RAFT [abc - S-R3F-xyz] Critical write error: write: no space left on device",
		"JetStream out of space, will be DISABLED",
		"JetStream out of file resources, will be DISABLED",
	} {
		var f storeFault
		for _, other := range []string{"JetStream cluster no metadata leader", "Error storing to stream: write error", "Critical write"} {
			f.observe(other)
		}
		if err := f.err(); err != nil {
			t.Fatalf("fault before %q: %v", msg, err)
		}
		f.observe(msg)
		f.observe("JetStream out of resources, will be DISABLED") // a later one is not kept
		err := f.err()
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Fatalf("after %q: %v", msg, err)
		}
		if err := f.dead(time.Hour); err != nil {
			t.Fatalf("dead within the grace: %v", err)
		}
		f.mu.Lock()
		f.since = f.since.Add(-time.Hour)
		f.mu.Unlock()
		if err := f.dead(time.Hour); err == nil || err.Error() != f.err().Error() {
			t.Fatalf("dead after the grace: %v", err)
		}
	}
}
