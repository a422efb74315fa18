package check

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// TestVerifyFindsEachViolation feeds the verifier made-up histories, one broken
// promise each, and expects exactly that rule to fire.
func TestVerifyFindsEachViolation(t *testing.T) {
	t.Parallel()
	created := func(key, fp string) storedEvent {
		return storedEvent{Type: events.OrderCreatedType, KeyHash: idempotency.KeyHash(api.DefaultTenant, key), Fingerprint: fp, HoldsKey: true}
	}
	ok201 := Attempt{Status: http.StatusCreated, Location: "/v1/orders/a", body: []byte(`{"id":"a"}`)}
	cases := []struct {
		name  string
		order *Order
		evs   []storedEvent
		rule  string // "" for no violation
	}{
		{"clean", &Order{Key: "k", Scenario: Sync, Fingerprint: "fp", Attempts: []Attempt{ok201, {Status: http.StatusCreated, Replayed: true, Location: "/v1/orders/a", body: []byte(`{"id":"a"}`)}}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp")}, ""},
		{"two orders", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{ok201}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp"), created("k", "fp")}, RuleNoSecond},
		{"accepted but lost", &Order{Key: "k", Scenario: Async, Attempts: []Attempt{{Status: http.StatusAccepted, Location: "/v1/orders/a"}}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			nil, RuleOneOrder},
		{"a rejection accepted but lost", &Order{Key: "k", Scenario: Reject, Attempts: []Attempt{{Status: http.StatusAccepted, Location: "/v1/orders/a"}}, ReadBack: "rejected"},
			nil, RuleOneOrder},
		{"a rejection accepted and stored", &Order{Key: "k", Scenario: Reject, Attempts: []Attempt{{Status: http.StatusAccepted, Location: "/v1/orders/a"}}, ReadBack: "rejected"},
			[]storedEvent{{Type: events.OrderRejectedType, KeyHash: idempotency.KeyHash(api.DefaultTenant, "k"), Fingerprint: "fp", HoldsKey: true}}, ""},
		{"a wrong total created", &Order{Key: "k", Scenario: Reject, Attempts: []Attempt{{Status: http.StatusAccepted, Location: "/v1/orders/a"}}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp")}, RuleOneOrder},
		{"replay differs", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{ok201, {Status: http.StatusCreated, Location: "/v1/orders/a", body: []byte(`{"id":"b"}`)}}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp")}, RuleReplay},
		{"replay names another order", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{ok201, {Status: http.StatusCreated, Location: "/v1/orders/b", body: []byte(`{"id":"a"}`)}}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp")}, RuleReplay},
		{"changed payload accepted", &Order{Key: "k", Scenario: Changed, ChangedFP: "fp2", Attempts: []Attempt{ok201, {Status: http.StatusCreated, Changed: true}}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp")}, RuleChanged},
		{"changed payload created an order", &Order{Key: "k", Scenario: Changed, ChangedFP: "fp2", Attempts: []Attempt{ok201, {Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused", Changed: true}}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp2")}, RuleChanged},
		{"read back other than answered", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{ok201}, ReadBack: "created", readBody: []byte(`{"id":"a","created_at":"later"}`)},
			[]storedEvent{created("k", "fp")}, RuleReadAsAnswered},
		{"not readable", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{ok201}, ReadBack: "not found"},
			[]storedEvent{created("k", "fp")}, RuleReadable},
		{"stray order", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{ok201}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp"), created("never-sent", "fp")}, RuleNoStray},
		{"order without an accept", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{{Status: http.StatusBadRequest}}},
			[]storedEvent{created("k", "fp")}, RuleNoStray},
		{"a dropped request may have made the order", &Order{Key: "k", Scenario: Drop, Attempts: []Attempt{{Dropped: true}, ok201}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp")}, ""},
		{"an unknown outcome may have made the order", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{{Status: http.StatusServiceUnavailable, Code: "outcome_unknown"}, ok201}, ReadBack: "created", readBody: []byte(`{"id":"a"}`)},
			[]storedEvent{created("k", "fp")}, ""},
		{"'nothing stored', yet an order", &Order{Key: "k", Scenario: Sync, Attempts: []Attempt{{Status: http.StatusServiceUnavailable, Code: "service_unavailable"}, {Status: http.StatusServiceUnavailable, Code: "service_unavailable"}}},
			[]storedEvent{created("k", "fp")}, RuleNothingStored},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &runner{cfg: Config{Tenant: api.DefaultTenant}, orders: []*Order{tc.order}}
			rep := r.verify(tc.evs, time.Second)
			var rules []string
			for _, v := range rep.Violations {
				rules = append(rules, v.Rule)
			}
			if tc.rule == "" && len(rules) > 0 || tc.rule != "" && !strings.Contains(strings.Join(rules, "|"), tc.rule) {
				t.Fatalf("violations %q, want %q", rules, tc.rule)
			}
		})
	}
}

// TestRunFailsFastWithoutTheAPIOrNATS: nothing to check against is an error
// at once, not after the workload.
func TestRunFailsFastWithoutTheAPIOrNATS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	cfg := Config{NATSURL: "nats://127.0.0.1:1", Clients: 1, Duration: time.Minute, Settle: time.Minute, RequestTimeout: time.Second}
	begin := time.Now()
	// Every API is asked, the second of two as well.
	for _, urls := range [][]string{{"http://127.0.0.1:1"}, {srv.URL, "http://127.0.0.1:1"}} {
		cfg.URLs = urls
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "cannot reach the API at http://127.0.0.1:1") || time.Since(begin) > 10*time.Second {
			t.Fatalf("no API at %v: %v after %s", urls, err, time.Since(begin))
		}
	}
	cfg.URLs = []string{srv.URL}
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "cannot read ORDER_EVENTS") || time.Since(begin) > 20*time.Second {
		t.Fatalf("no NATS: %v after %s", err, time.Since(begin))
	}
}

// TestAnswersAreBounded: the URL checked may answer without end; the checker
// reads at most maxResponse of an answer and counts a longer one as none.
// Before, it read whatever came (here 64 MiB, allocating twice as much).
func TestAnswersAreBounded(t *testing.T) {
	// Not parallel: the allocations counted are the process's.
	chunk := make([]byte, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	r := &runner{cfg: Config{URLs: []string{srv.URL}}, client: srv.Client(), deadline: time.Now().Add(time.Minute)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a := r.post(context.Background(), &Order{Key: "k"}, []byte(`{}`), "", false, false)
	runtime.ReadMemStats(&after)
	if a.Status != 0 || !strings.Contains(a.Err, "an answer of more than 1048576 bytes") {
		t.Fatalf("an endless answer: status %d, error %q", a.Status, a.Err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("reading the answer allocated %d MiB", alloc>>20)
	}
}

// TestWeightsOfZeroAreRefused: a mix whose weights add up to 0 (check
// --mix=sync:0) panicked in the first client picking a scenario; it is
// refused with the configuration.
func TestWeightsOfZeroAreRefused(t *testing.T) {
	t.Parallel()
	cfg := Config{URLs: []string{"http://127.0.0.1:1"}, NATSURL: "nats://127.0.0.1:1", Clients: 1, Orders: 1, Settle: time.Second, RequestTimeout: time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("no weights (all equal): %v", err)
	}
	for _, w := range []map[Scenario]int{{Sync: 0}, {Sync: 0, Async: 0}, {"nonesuch": 5}} {
		cfg.Weights = w
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "add up to 0") {
			t.Errorf("weights %v: %v, want a refusal", w, err)
		}
	}
	cfg.Weights = map[Scenario]int{Sync: 0, Async: 1}
	if err := cfg.Validate(); err != nil {
		t.Errorf("sync:0,async:1: %v", err)
	}
}
