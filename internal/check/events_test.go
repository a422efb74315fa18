package check

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestReadingEventsWaitsForNATS: when NATS does not answer at first (here
// stopped, and started again 3 s later on its data, as a cluster after a
// restart of all its nodes), the checker reads ORDER_EVENTS again until it
// answers instead of ending the run with the first error, and says so; and
// it gives up after its patience. Before, a CI run's whole-cluster restart
// test ended on one timeout of that read.
func TestReadingEventsWaitsForNATS(t *testing.T) {
	t.Parallel()
	creds := orderlytest.NewCredentials(t)
	dir, port := t.TempDir(), orderlytest.FreePort(t)
	url, stop := orderlytest.ExternalNATS(t, dir, port, creds)
	orderlytest.Setup(t, url, creds, 1)
	stop()

	var progress bytes.Buffer
	cfg := Config{NATSURL: url, NATSCredentials: orderlytest.As(creds, natsauth.Operator), Progress: &progress}
	type result struct {
		evs []storedEvent
		err error
	}
	done := make(chan result, 1)
	go func() {
		evs, err := readEventsPatiently(context.Background(), cfg, time.Now().Add(-time.Hour), "c-1", 30*time.Second)
		done <- result{evs, err}
	}()
	time.Sleep(3 * time.Second)
	orderlytest.ExternalNATS(t, dir, port, creds)
	r := <-done
	if r.err != nil {
		t.Fatalf("reading ORDER_EVENTS after NATS came back: %v", r.err)
	}
	if len(r.evs) != 0 {
		t.Errorf("%d events of a customer that ordered nothing", len(r.evs))
	}
	if !strings.Contains(progress.String(), "reading ORDER_EVENTS: ") || !strings.Contains(progress.String(), "again in 2 s") {
		t.Errorf("the failed reads were not reported: %q", progress.String())
	}

	cfg.NATSURL, cfg.Progress = "nats://127.0.0.1:1", nil
	begin := time.Now()
	if _, err := readEventsPatiently(context.Background(), cfg, time.Now(), "c-1", 5*time.Second); err == nil || time.Since(begin) > 10*time.Second {
		t.Errorf("without NATS: %v after %s, want an error within about 5 s", err, time.Since(begin).Round(time.Millisecond))
	}
}
