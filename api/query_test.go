package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/problem"
)

// TestUnknownQueryParametersAreRefused: a query parameter a request does
// not take is a 400 naming it, not ignored (?wiat=10s answered at once
// instead of long-polling), and nothing reaches the service; a query
// string that cannot be read is one too. What comes back of a name is
// quoted and cut.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	t.Parallel()
	svc := &fakeService{order: idempotency.Order{Status: idempotency.StatusCreated, Body: []byte(`{}`)}}
	h := handler(t, api.Config{MaxWait: 30 * time.Second}, svc)
	post := []string{"Content-Type: application/json", "Idempotency-Key: k-1"}
	hostile := strings.Repeat("\x1b\u202e", 200)
	for _, tc := range []struct {
		method, path string
		fields       []string // the field errors' names, in order
	}{
		{http.MethodGet, "/v1/orders/ord_1?wiat=10s", []string{"wiat"}},
		{http.MethodGet, "/v1/orders/ord_1?wait=1s&b=1&a=2", []string{"a", "b"}},
		{http.MethodHead, "/v1/orders/ord_1?x", []string{"x"}},
		{http.MethodGet, "/v1/orders/ord_1/events?wait=10s", []string{"wait"}},
		{http.MethodPost, "/v1/orders?dry_run=true", []string{"dry_run"}},
		{http.MethodGet, "/v1/orders/ord_1?wait=1;x=2", []string{"query"}},
		{http.MethodGet, "/v1/orders/ord_1?%zz=1", []string{"query"}},
		{http.MethodGet, "/v1/orders/ord_1?" + url.QueryEscape(hostile) + "=1", nil},
	} {
		w := do(h, tc.method, tc.path, order, post...)
		if w.Code != http.StatusBadRequest {
			t.Errorf("%s %.80q: %d %.300s, want 400", tc.method, tc.path, w.Code, w.Body)
			continue
		}
		if tc.method == http.MethodHead {
			continue // no body to read
		}
		var p problem.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Code != problem.CodeInvalid {
			t.Errorf("%s %.80q: %v %.300s", tc.method, tc.path, err, w.Body)
			continue
		}
		var names []string
		for _, e := range p.Errors {
			names = append(names, e.Field)
			if strings.ContainsAny(e.Field, "\x1b\u202e") || len(e.Field) > 6*problem.MaxQuoted+8 {
				t.Errorf("%.80q: a field of %d bytes sent back raw: %.100q", tc.path, len(e.Field), e.Field)
			}
		}
		if tc.fields != nil && strings.Join(names, ",") != strings.Join(tc.fields, ",") {
			t.Errorf("%s %.80q: fields %q, want %q (%s)", tc.method, tc.path, names, tc.fields, w.Body)
		}
	}
	// Thousands of parameters: a bounded answer.
	var many strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&many, "p%d=1&", i)
	}
	w := do(h, http.MethodGet, "/v1/orders/ord_1?"+many.String(), "")
	var p problem.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); w.Code != http.StatusBadRequest || err != nil || len(p.Errors) != api.MaxFieldErrors ||
		!strings.Contains(p.Detail, "2000 unknown query parameters") {
		t.Errorf("2,000 parameters: %d, %d field errors, %q", w.Code, len(p.Errors), p.Detail)
	}
	if len(svc.submits) != 0 || svc.wait != 0 {
		t.Fatalf("refused requests reached the service: %d submits, a wait of %s", len(svc.submits), svc.wait)
	}
	// The parameters a request takes still work.
	if w := do(h, http.MethodGet, "/v1/orders/ord_1?wait=3s", ""); w.Code != 200 || svc.wait != 3*time.Second {
		t.Fatalf("?wait=3s: %d, wait %s", w.Code, svc.wait)
	}
}

// TestWaitIsCapped: ?wait= of any size, in seconds or as a duration, even
// one too large for time.Duration, waits at most --max-wait; a negative one
// does not wait.
func TestWaitIsCapped(t *testing.T) {
	t.Parallel()
	svc := &fakeService{order: idempotency.Order{Status: idempotency.StatusCreated, Body: []byte("{}")}}
	h := handler(t, api.Config{MaxWait: 30 * time.Second}, svc)
	for wait, want := range map[string]time.Duration{
		"3s": 3 * time.Second, "7": 7 * time.Second, "31s": 30 * time.Second, "45": 30 * time.Second,
		"99999999999999999999": 30 * time.Second, "9999999999h": 30 * time.Second, "2562048h": 30 * time.Second,
		"-5s": 0,
	} {
		if w := do(h, http.MethodGet, "/v1/orders/ord_1?wait="+wait, ""); w.Code != 200 || svc.wait != want {
			t.Errorf("?wait=%s: %d, a wait of %s, want %s", wait, w.Code, svc.wait, want)
		}
	}
}
