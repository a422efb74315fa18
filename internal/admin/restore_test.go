package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
)

// FuzzSetReplicas: a consumer entry of a backup comes back with its
// configuration's replica count set and every other value as it was, numbers
// of any size included (a float64 would round a sequence above 2^53); what
// is not such an entry is an error, never a panic.
func FuzzSetReplicas(f *testing.F) {
	f.Add([]byte(`{"config":{"durable_name":"processor","num_replicas":3,"ack_wait":30000000000},"state":{"delivered":{"consumer_seq":18446744073709551615,"stream_seq":9007199254740993}}}`), 1)
	f.Add([]byte(`{"config":{}}`), 3)
	f.Add([]byte(`{"state":{}}`), 1)
	f.Add([]byte(`[]`), 1)
	f.Fuzz(func(t *testing.T, data []byte, replicas int) {
		out, err := setReplicas(data, replicas)
		if err != nil {
			return
		}
		before, after := decodeNumbers(t, data), decodeNumbers(t, out)
		cfg, ok := after["config"].(map[string]any)
		if !ok || cfg["num_replicas"] != json.Number(fmtInt(replicas)) {
			t.Fatalf("%s: num_replicas not %d in %s", data, replicas, out)
		}
		delete(cfg, "num_replicas")
		delete(before["config"].(map[string]any), "num_replicas")
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("%s became %s", data, out)
		}
	})
}

func decodeNumbers(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

func fmtInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestRetryRestore: which failures of a stream's restore are tried again.
// A snapshot whose first chunk found no responders (a cluster's node that
// takes it subscribes, then answers, and the subscription may reach the
// client's node later) is tried again every second for 30 s, and so is one
// the server refuses with "stream name already in use" (10130) while it
// holds a stalled restore.
func TestRetryRestore(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	inUse := &api.ApiError{Code: 400, ErrCode: 10130, Description: "stream name already in use, cannot restore"}
	for _, c := range []struct {
		name    string
		err     error
		attempt int
		unheard time.Time
		now     time.Time
		wait    time.Duration
		again   bool
	}{
		{name: "done", err: nil, attempt: 1, now: t0},
		{name: "storage directory", err: errors.New("could not create storage directory"), attempt: 1, now: t0, wait: 200 * time.Millisecond, again: true},
		{name: "storage directory, fifth", err: errors.New("could not create storage directory"), attempt: 5, now: t0, wait: 200 * time.Millisecond},
		{name: "no responders", err: nats.ErrNoResponders, attempt: 1, now: t0, wait: time.Second, again: true},
		{name: "no responders, wrapped, later", err: fmt.Errorf("restore: %w", nats.ErrNoResponders), attempt: 7, unheard: t0, now: t0.Add(10 * time.Second), wait: time.Second, again: true},
		{name: "in use after no responders", err: inUse, attempt: 2, unheard: t0, now: t0.Add(time.Second), wait: time.Second, again: true},
		{name: "in use, 30 s after", err: inUse, attempt: 20, unheard: t0, now: t0.Add(30 * time.Second), wait: time.Second},
		{name: "in use first", err: inUse, attempt: 1, now: t0, wait: time.Second, again: true},
		{name: "another error", err: errors.New("insufficient resources"), attempt: 1, now: t0},
	} {
		wait, again := retryRestore(c.err, c.attempt, c.unheard, c.now)
		if again != c.again || (again && wait != c.wait) {
			t.Errorf("%s: wait %s again %v, want %s %v", c.name, wait, again, c.wait, c.again)
		}
	}
}
