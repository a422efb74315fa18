package bench

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
)

// TestCeilingRunsWithoutPollingClients: the ceiling answers 201s only, so
// a load with polling clients (--poll) runs there without them, and its row
// has no poll figures.
func TestCeilingRunsWithoutPollingClients(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(BaselineHandler())
	defer srv.Close()
	cfg := CompareConfig{
		Load:     Config{Connections: 2, Requests: 20, PayloadSize: 500, Mix: Mix{New: 100}, Async: true, Poll: true, PollEvery: 1},
		Ceiling:  []string{"sh", "-c", "echo " + srv.URL + "; exec sleep 60"},
		Progress: io.Discard,
	}
	res, err := runCeiling(context.Background(), cfg, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 20 || res.Status["201"] != 20 || res.Polls != nil {
		t.Fatalf("ceiling: %d requests, status %v, polls %+v; want 20 201s and no poll figures", res.Requests, res.Status, res.Polls)
	}
}
