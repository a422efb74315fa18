package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/ops"
	"github.com/orderly-dev/orderly/internal/problem"
)

// fakeService records what the handlers asked and answers what the test set.
type fakeService struct {
	mu      sync.Mutex
	submits []app.SubmitOrder
	tenant  string
	wait    time.Duration
	outcome app.Outcome
	order   idempotency.Order
	err     error
}

func (f *fakeService) Submit(_ context.Context, in app.SubmitOrder) (app.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits = append(f.submits, in)
	return f.outcome, f.err
}

func (f *fakeService) Order(_ context.Context, tenant, _ string, wait time.Duration) (idempotency.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tenant, f.wait = tenant, wait
	return f.order, f.err
}

func (f *fakeService) OrderEvents(_ context.Context, tenant, _ string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tenant = tenant
	return []byte(`[]`), f.err
}

const order = `{"customer_id":"c-42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}],"total":4990}`

// TestMissingKeyNamesTheHeaderMeant: a key sent under another spelling of
// the header (the X- prefix of older APIs, an underscore that proxies
// drop) is missing, and the problem says which header came instead.
func TestMissingKeyNamesTheHeaderMeant(t *testing.T) {
	t.Parallel()
	h := handler(t, api.Config{}, &fakeService{})
	for header, want := range map[string]string{
		"X-Idempotency-Key": "this request has the header X-Idempotency-Key instead, and the name is Idempotency-Key",
		"Idempotency_Key":   "this request has the header Idempotency_key instead, and the name is Idempotency-Key",
		"IdempotencyKey":    "this request has the header Idempotencykey instead, and the name is Idempotency-Key",
		"X-Request-Id":      "",
	} {
		w := do(h, http.MethodPost, "/v1/orders", order, "Content-Type: application/json", header+": k-1")
		var p problem.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 400 || p.Code != "idempotency_key_missing" {
			t.Fatalf("%s: %d %s", header, w.Code, w.Body)
		}
		if got := strings.TrimPrefix(p.Detail, "the Idempotency-Key header is required"); want == "" && got != "" || want != "" && got != "; "+want {
			t.Errorf("%s: detail %q, want the required header's and %q", header, p.Detail, want)
		}
	}
}

func handler(t *testing.T, cfg api.Config, svc api.Service) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	o, err := ops.NewHandler(ops.Config{}, nil, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(cfg, svc, o, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func do(h http.Handler, method, path, body string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.RemoteAddr = "127.0.0.1:40000" // a client on the host, as on orderly's default address
	for _, l := range header {
		k, v, _ := strings.Cut(l, ":")
		r.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func code(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q for %d %s", ct, w.Code, w.Body)
	}
	var p struct{ Code string }
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p.Code
}

func TestPostTranslatesOutcomes(t *testing.T) {
	t.Parallel()
	stored := idempotency.Record{State: idempotency.StateCompleted, OrderID: "ord_1", Status: 201, Location: "/v1/orders/ord_1", ContentType: "application/json", Body: []byte(`{"id":"ord_1"}`)}
	cases := []struct {
		name    string
		outcome app.Outcome
		err     error
		status  int
		code    string
		headers map[string]string
		body    string
	}{
		{name: "created", outcome: app.Outcome{Kind: app.Completed, OrderID: "ord_1", Record: stored}, status: 201,
			headers: map[string]string{"Location": "/v1/orders/ord_1", "Idempotent-Replayed": ""}, body: `{"id":"ord_1"}`},
		{name: "replayed", outcome: app.Outcome{Kind: app.Completed, OrderID: "ord_1", Record: stored, Replayed: true}, status: 201,
			headers: map[string]string{"Idempotent-Replayed": "true"}, body: `{"id":"ord_1"}`},
		{name: "accepted", outcome: app.Outcome{Kind: app.Accepted, OrderID: "ord_2"}, status: 202,
			headers: map[string]string{"Location": "/v1/orders/ord_2", "Retry-After": "1"}, body: `{"id":"ord_2","status":"pending"}`},
		{name: "in progress", outcome: app.Outcome{Kind: app.InProgress, OrderID: "ord_3"}, status: 409, code: "idempotency_key_in_use",
			headers: map[string]string{"Location": "/v1/orders/ord_3", "Retry-After": "1"}},
		{name: "key reused", err: &app.KeyReusedError{OrderID: "ord_4"}, status: 422, code: "idempotency_key_reused"},
		{name: "unavailable", err: fmt.Errorf("publish: %w", app.ErrUnavailable), status: 503, code: "service_unavailable",
			headers: map[string]string{"Retry-After": "1"}},
		{name: "outcome unknown", err: fmt.Errorf("publish: %w", app.ErrOutcomeUnknown), status: 503, code: "outcome_unknown",
			headers: map[string]string{"Retry-After": "1"}},
		{name: "a bug", err: errors.New("boom"), status: 500, code: "internal_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := &fakeService{outcome: tc.outcome, err: tc.err}
			w := do(handler(t, api.DefaultConfig(), svc), http.MethodPost, "/v1/orders", order, "Content-Type: application/json", "Idempotency-Key: k")
			if w.Code != tc.status {
				t.Fatalf("status %d %s, want %d", w.Code, w.Body, tc.status)
			}
			if tc.code != "" && code(t, w) != tc.code {
				t.Fatalf("code %s, want %s", code(t, w), tc.code)
			}
			for k, v := range tc.headers {
				if got := w.Header().Get(k); got != v {
					t.Fatalf("%s: %q, want %q", k, got, v)
				}
			}
			if tc.body != "" && w.Body.String() != tc.body {
				t.Fatalf("body %s, want %s", w.Body, tc.body)
			}
		})
	}
}

// TestPostBuildsTheCommand: the service gets the tenant-scoped key hash, the
// fingerprint and the waits the client asked for (capped).
func TestPostBuildsTheCommand(t *testing.T) {
	t.Parallel()
	svc := &fakeService{outcome: app.Outcome{Kind: app.Accepted, OrderID: "ord_1"}}
	h := handler(t, api.Config{Wait: 2 * time.Second, MaxWait: 5 * time.Second}, svc)
	for _, tc := range []struct {
		prefer    string
		wait, wfp time.Duration
		applied   string
	}{
		{"", 2 * time.Second, 0, ""},
		{"respond-async", 0, 0, "respond-async"},
		{"wait=3", 3 * time.Second, 3 * time.Second, "wait=3"},
		{"wait=100", 5 * time.Second, 5 * time.Second, "wait=5"},
	} {
		hdr := []string{"Content-Type: application/json", `Idempotency-Key: "k"`}
		if tc.prefer != "" {
			hdr = append(hdr, "Prefer: "+tc.prefer)
		}
		w := do(h, http.MethodPost, "/v1/orders", order, hdr...)
		in := svc.submits[len(svc.submits)-1]
		if w.Code != 202 || in.Wait != tc.wait || in.WaitForPending != tc.wfp || w.Header().Get("Preference-Applied") != tc.applied {
			t.Fatalf("Prefer %q: %d, wait %s/%s, applied %q", tc.prefer, w.Code, in.Wait, in.WaitForPending, w.Header().Get("Preference-Applied"))
		}
		if in.Tenant != api.DefaultTenant || in.KeyHash != idempotency.KeyHash(api.DefaultTenant, "k") || in.Fingerprint != idempotency.Fingerprint(in.Request) {
			t.Fatalf("submitted %+v", in)
		}
	}
}

// TestPostRefusesBadRequestsBeforeTheService: nothing reaches the service.
func TestPostRefusesBadRequestsBeforeTheService(t *testing.T) {
	t.Parallel()
	svc := &fakeService{}
	h := handler(t, api.Config{BodyLimit: 1024}, svc)
	long := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name   string
		body   string
		header []string
		status int
		code   string
	}{
		{"no key", order, []string{"Content-Type: application/json"}, 400, "idempotency_key_missing"},
		{"two keys", order, []string{"Content-Type: application/json", "Idempotency-Key: a", "Idempotency-Key: b"}, 400, "idempotency_key_invalid"},
		{"not JSON", order, []string{"Content-Type: text/plain", "Idempotency-Key: a"}, 415, "unsupported_media_type"},
		{"too large", `{"customer_id":"` + strings.Repeat("x", 2000) + `"}`, []string{"Content-Type: application/json", "Idempotency-Key: a"}, 413, "request_too_large"},
		{"invalid", `{"customer_id":""}`, []string{"Content-Type: application/json", "Idempotency-Key: a"}, 400, "invalid_request"},
		// what comes back of a header is quoted and cut (problem.Quoted)
		{"hostile type", order, []string{"Content-Type: text/\x1b[2J" + long, "Idempotency-Key: a"}, 415, "unsupported_media_type"},
		{"hostile parameter", order, []string{"Content-Type: application/json; charset=\u202e" + long, "Idempotency-Key: a"}, 415, "unsupported_media_type"},
		{"hostile coding", order, []string{"Content-Type: application/json", "Content-Encoding: \x1b]0;" + long, "Idempotency-Key: a"}, 415, "unsupported_media_type"},
	} {
		w := do(h, http.MethodPost, "/v1/orders", tc.body, tc.header...)
		if w.Code != tc.status || code(t, w) != tc.code {
			t.Fatalf("%s: %d %.300s", tc.name, w.Code, w.Body)
		}
		var p problem.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || len(p.Detail) > 2*problem.MaxQuoted+64 || strings.ContainsAny(p.Detail, "\x1b\u202e") {
			t.Errorf("%s: detail of %d bytes: %.300q", tc.name, len(p.Detail), p.Detail)
		}
	}
	if len(svc.submits) != 0 {
		t.Fatalf("%d requests reached the service", len(svc.submits))
	}
}

// TestTooLargeSaysTheLimitAsTheFlagTakesIt: --body-limit takes 64KiB, and
// the 413 says the limit that way, with its bytes.
func TestTooLargeSaysTheLimitAsTheFlagTakesIt(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int64]string{
		1024:    "the body must be at most 1 KiB (1024 bytes)",
		3 << 20: "the body must be at most 3 MiB (3145728 bytes)",
		2000:    "the body must be at most 2000 bytes",
		1536:    "the body must be at most 1536 bytes",
	} {
		h := handler(t, api.Config{BodyLimit: limit}, &fakeService{})
		w := do(h, http.MethodPost, "/v1/orders", `{"customer_id":"`+strings.Repeat("x", int(limit))+`"}`, "Content-Type: application/json", "Idempotency-Key: a")
		var p problem.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 413 || p.Detail != want {
			t.Errorf("limit %d: %d %q, want %q", limit, w.Code, p.Detail, want)
		}
	}
}

func TestTokensScopeTenants(t *testing.T) {
	t.Parallel()
	svc := &fakeService{outcome: app.Outcome{Kind: app.Accepted, OrderID: "ord_1"}, order: idempotency.Order{Status: idempotency.StatusCreated, Body: []byte("{}")}}
	h := handler(t, api.Config{Tokens: map[string]string{"secret-a": "tenant-a"}}, svc)
	if w := do(h, http.MethodPost, "/v1/orders", order, "Content-Type: application/json", "Idempotency-Key: k"); w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d", w.Code)
	}
	if w := do(h, http.MethodGet, "/v1/orders/ord_1", "", "Authorization: Bearer wrong"); w.Code != 401 {
		t.Fatalf("bad token: %d", w.Code)
	}
	// The token under another scheme, or without one, is no bearer token
	// (RFC 6750): "Basic  " and "Token: " are as long as "Bearer ".
	for _, auth := range []string{"Basic  secret-a", "Token: secret-a", "Bearer_secret-a", "secret-a", "Bearer", "Bearer "} {
		if w := do(h, http.MethodGet, "/v1/orders/ord_1", "", "Authorization: "+auth); w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("Authorization: %s: %d", auth, w.Code)
		}
	}
	w := do(h, http.MethodPost, "/v1/orders", order, "Content-Type: application/json", "Idempotency-Key: k", "Authorization: Bearer secret-a")
	if w.Code != 202 || svc.submits[0].Tenant != "tenant-a" || svc.submits[0].KeyHash != idempotency.KeyHash("tenant-a", "k") {
		t.Fatalf("with a token: %d %+v", w.Code, svc.submits)
	}
	if w := do(h, http.MethodGet, "/v1/orders/ord_1", "", "Authorization: bearer secret-a"); w.Code != 200 || svc.tenant != "tenant-a" {
		t.Fatalf("GET with a token: %d tenant %q", w.Code, svc.tenant)
	}
}

// TestTokensReplace: a replaced set takes effect for the next request; an
// empty set, or one for an API that started without tokens, is refused and
// changes nothing. The race detector runs requests beside the replaces.
func TestTokensReplace(t *testing.T) {
	t.Parallel()
	svc := &fakeService{order: idempotency.Order{Status: idempotency.StatusCreated, Body: []byte("{}")}}
	reg := prometheus.NewRegistry()
	o, err := ops.NewHandler(ops.Config{}, nil, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Tokens: map[string]string{"secret-token-a": "tenant-a", "secret-token-b": "tenant-b"}}, svc, o, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	get := func(token string) int {
		return do(h, http.MethodGet, "/v1/orders/ord_1", "", "Authorization: Bearer "+token).Code
	}
	if get("secret-token-a") != 200 || get("secret-token-c") != 401 {
		t.Fatal("the tokens it started with")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // requests while the set is replaced
		defer wg.Done()
		for range 200 {
			if c := get("secret-token-b"); c != 200 && c != 401 {
				t.Errorf("a request during the replaces: %d", c)
			}
		}
	}()
	c, err := h.Tokens.Replace(map[string]string{"secret-token-b": "tenant-c", "secret-token-c": "tenant-c"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.TokenChange{Tokens: 2, Tenants: 1, Added: []string{api.TokenID("secret-token-c")},
		Removed: []string{api.TokenID("secret-token-a")}, Moved: []string{api.TokenID("secret-token-b")}}); !reflect.DeepEqual(c, want) {
		t.Errorf("change %+v, want %+v", c, want)
	}
	if get("secret-token-a") != 401 || get("secret-token-c") != 200 {
		t.Fatal("after the replace: the removed token still works, or the added one does not")
	}
	wg.Wait()
	if get("secret-token-b") != 200 || svc.tenant != "tenant-c" {
		t.Fatalf("a token moved to another tenant: tenant %q", svc.tenant)
	}
	if _, err := h.Tokens.Replace(nil); err == nil || get("secret-token-c") != 200 {
		t.Fatalf("an empty set: %v", err)
	}
	if _, err := h.Tokens.Replace(map[string]string{"secret-token-d": ""}); err == nil || get("secret-token-c") != 200 {
		t.Fatalf("a token without a tenant: %v", err)
	}

	reg2 := prometheus.NewRegistry()
	o2, err := ops.NewHandler(ops.Config{}, nil, nil, reg2)
	if err != nil {
		t.Fatal(err)
	}
	open, err := api.New(api.Config{}, svc, o2, reg2, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Tokens.Replace(map[string]string{"secret-token-a": "tenant-a"}); err == nil {
		t.Fatal("an API without tokens took some while it ran")
	}
	if w := do(open, http.MethodGet, "/v1/orders/ord_1", ""); w.Code != 200 {
		t.Fatalf("the API without tokens after the refused replace: %d", w.Code)
	}
}

func TestGetOrder(t *testing.T) {
	t.Parallel()
	svc := &fakeService{order: idempotency.Order{Status: idempotency.StatusPending, Body: []byte(`{"status":"pending"}`)}}
	h := handler(t, api.Config{MaxWait: 30 * time.Second}, svc)
	w := do(h, http.MethodGet, "/v1/orders/ord_1?wait=10s", "")
	if w.Code != 200 || w.Header().Get("Retry-After") != "1" || svc.wait != 10*time.Second || !bytes.Equal(w.Body.Bytes(), []byte(`{"status":"pending"}`)) {
		t.Fatalf("pending: %d %v wait %s", w.Code, w.Header(), svc.wait)
	}
	if w := do(h, http.MethodGet, "/v1/orders/ord_1?wait=2h", ""); w.Code != 200 || svc.wait != 30*time.Second {
		t.Fatalf("capped wait: %d %s", w.Code, svc.wait)
	}
	if w := do(h, http.MethodGet, "/v1/orders/ord_1?wait=soon", ""); w.Code != 400 || code(t, w) != "invalid_request" {
		t.Fatalf("bad wait: %d", w.Code)
	}
	if w := do(h, http.MethodGet, "/v1/orders/ord_1?wait=10s&wait=1", ""); w.Code != 400 || code(t, w) != "invalid_request" || !strings.Contains(w.Body.String(), `"field":"wait"`) {
		t.Fatalf("wait given twice: %d %s", w.Code, w.Body)
	}
	svc.err = app.ErrNotFound
	if w := do(h, http.MethodGet, "/v1/orders/ord_1", ""); w.Code != 404 || code(t, w) != "not_found" {
		t.Fatalf("not found: %d", w.Code)
	}
	if w := do(h, http.MethodGet, "/v1/orders/ord_1/events", ""); w.Code != 404 {
		t.Fatalf("events not found: %d", w.Code)
	}
	// A keyed order that lost its key: see the holder (or its events).
	svc.err = &app.SupersededError{OrderID: "ord_9"}
	for path, loc := range map[string]string{"/v1/orders/ord_1": "/v1/orders/ord_9", "/v1/orders/ord_1/events": "/v1/orders/ord_9/events"} {
		w := do(h, http.MethodGet, path, "")
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != loc || code(t, w) != "order_superseded" || !strings.Contains(w.Body.String(), `"order_id":"ord_9"`) {
			t.Fatalf("%s superseded: %d %v %s", path, w.Code, w.Header(), w.Body)
		}
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	h := handler(t, api.DefaultConfig(), &fakeService{})
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/healthz", 200},
		{http.MethodHead, "/healthz", 200},
		{http.MethodGet, "/readyz", 200},
		{http.MethodGet, "/metrics", 200},
		{http.MethodGet, "/openapi.json", 200},
		{http.MethodDelete, "/v1/orders", 405},
		{http.MethodGet, "/nowhere", 404},
	} {
		if w := do(h, tc.method, tc.path, ""); w.Code != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, w.Code, tc.status)
		}
	}
	// A path is sent back in a 404's or 405's detail quoted and cut short:
	// escape sequences and marks that reverse text as escapes, not whole.
	hostile := "/v1/%1b]0;x%07%e2%80%ae" + strings.Repeat("a", 5000)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, hostile, 404},
		{http.MethodDelete, "/v1/orders/ord_%1b]0;x%07%e2%80%ae" + strings.Repeat("a", 5000), 405},
	} {
		w := do(h, tc.method, tc.path, "")
		var p problem.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != tc.status {
			t.Fatalf("%s %.20s: %d, %v", tc.method, tc.path, w.Code, err)
		}
		if len(p.Detail) > 2*problem.MaxQuoted || strings.ContainsAny(p.Detail, "\x1b\x07\u202e") {
			t.Errorf("%s %.20s: detail of %d bytes: %.300q", tc.method, tc.path, len(p.Detail), p.Detail)
		}
	}
	if w := do(h, http.MethodGet, hostile, ""); !strings.Contains(w.Body.String(), `no resource at \"/v1/\\x1b]0;x\\a\\u202eaaa`) {
		t.Errorf("404's detail: %.300s", w.Body)
	}
}

// TestUnavailableSaysWhatTheRequestLeft: a 503 for want of the store tells a
// POST that nothing was stored and to retry with the same key; a read stores
// nothing and has no key, so its 503 says neither.
func TestUnavailableSaysWhatTheRequestLeft(t *testing.T) {
	t.Parallel()
	svc := &fakeService{err: fmt.Errorf("read: %w", app.ErrUnavailable)}
	h := handler(t, api.DefaultConfig(), svc)
	detail := func(w *httptest.ResponseRecorder) string {
		t.Helper()
		if w.Code != http.StatusServiceUnavailable || code(t, w) != "service_unavailable" || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("%d %s, want 503 service_unavailable with Retry-After", w.Code, w.Body)
		}
		var p struct{ Detail string }
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		return p.Detail
	}
	post := detail(do(h, http.MethodPost, "/v1/orders", order, "Content-Type: application/json", "Idempotency-Key: k"))
	if !strings.Contains(post, "nothing was stored") || !strings.Contains(post, "same idempotency key") {
		t.Errorf("POST: %q, want it to say nothing was stored and to retry with the same key", post)
	}
	for _, path := range []string{"/v1/orders/ord_0000000000001abc", "/v1/orders/ord_0000000000001abc/events"} {
		got := detail(do(h, http.MethodGet, path, ""))
		if strings.Contains(got, "stored") || strings.Contains(got, "idempotency") || !strings.Contains(got, "retry") {
			t.Errorf("GET %s: %q, want a retry without a word of storing or keys", path, got)
		}
	}
}

// TestHangUpsAreCountedAs499: a client that goes away is not a 503 in the
// metrics.
func TestHangUpsAreCountedAs499(t *testing.T) {
	t.Parallel()
	svc := &fakeService{err: fmt.Errorf("publish: %w", app.ErrUnavailable)}
	h := handler(t, api.DefaultConfig(), svc)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(order)).WithContext(ctx)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	m := do(h, http.MethodGet, "/metrics", "")
	if !strings.Contains(m.Body.String(), `orderly_http_requests_total{code="499",method="POST",route="/v1/orders"} 1`) ||
		!strings.Contains(m.Body.String(), `orderly_http_requests_total{code="503",method="POST",route="/v1/orders"} 0`) {
		t.Fatalf("metrics after a hang-up:\n%s", m.Body)
	}
}

// TestDocumentedResponsesStartAtZero: every response the OpenAPI document
// names is a series of orderly_http_requests_total at 0 before any request,
// so that rate() and an alert on 5xx see the first one.
func TestDocumentedResponsesStartAtZero(t *testing.T) {
	t.Parallel()
	h := handler(t, api.DefaultConfig(), &fakeService{})
	body := do(h, http.MethodGet, "/metrics", "").Body.String()
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, ops := range doc.Paths {
		route := strings.ReplaceAll(strings.ReplaceAll(path, "{", ":"), "}", "")
		for method, op := range ops {
			for code := range op.Responses {
				n++
				series := fmt.Sprintf(`orderly_http_requests_total{code=%q,method=%q,route=%q} 0`, code, strings.ToUpper(method), route)
				if !strings.Contains(body, series+"\n") {
					t.Errorf("no %s before any request", series)
				}
			}
		}
	}
	if n < 40 {
		t.Fatalf("the OpenAPI document names %d responses; want every route's", n)
	}
}

// replayService answers every submit with the same stored response, as the
// hub's cache answers a retry: the handler's own work is what is measured.
type replayService struct{ out app.Outcome }

func (s replayService) Submit(context.Context, app.SubmitOrder) (app.Outcome, error) {
	return s.out, nil
}

func (replayService) Order(context.Context, string, string, time.Duration) (idempotency.Order, error) {
	return idempotency.Order{}, nil
}

func (replayService) OrderEvents(context.Context, string, string) ([]byte, error) { return nil, nil }

// BenchmarkCreateOrderReplay: one POST /v1/orders answered from a stored
// response, through the whole handler chain (tracing, metrics, recovery,
// body, decoding, fingerprint); its allocations drive the GC work of the
// replay load (go test -bench CreateOrderReplay -benchmem ./api/).
func BenchmarkCreateOrderReplay(b *testing.B) {
	body := `{"customer_id":"c-42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495},{"sku":"SKU-2","quantity":1,"unit_price":999},{"sku":"SKU-3","quantity":3,"unit_price":150}],"total":6439}`
	stored := idempotency.Record{State: idempotency.StateCompleted, OrderID: "ord_0000000000001AYgtf0Exck_pdTHqc6a4", Fingerprint: "f",
		Status: 201, Location: "/v1/orders/ord_0000000000001AYgtf0Exck_pdTHqc6a4", ContentType: "application/json", Body: []byte(`{"id":"ord_0000000000001AYgtf0Exck_pdTHqc6a4","status":"created"}`)}
	reg := prometheus.NewRegistry()
	o, err := ops.NewHandler(ops.Config{}, nil, nil, reg)
	if err != nil {
		b.Fatal(err)
	}
	h, err := api.New(api.DefaultConfig(), replayService{app.Outcome{Kind: app.Completed, OrderID: stored.OrderID, Record: stored, Replayed: true}}, o, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "replay-key-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// TestPendingRetryAfterSaysTheDecisionDelay: while decisions trail a burst
// (DecisionDelay), a pending answer tells the client to come back when its
// decision may be there, in whole seconds rounded up; a 503 still says 1,
// and so does a pending answer without a delay.
func TestPendingRetryAfterSaysTheDecisionDelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		delay time.Duration
		want  string
	}{{8 * time.Second, "8"}, {7200 * time.Millisecond, "8"}, {10 * time.Minute, "600"}, {time.Second, "1"}, {300 * time.Millisecond, "1"}, {0, "1"}} {
		cfg := api.DefaultConfig()
		cfg.DecisionDelay = func() time.Duration { return c.delay }
		post := func(out app.Outcome, err error) *httptest.ResponseRecorder {
			return do(handler(t, cfg, &fakeService{outcome: out, err: err}), http.MethodPost, "/v1/orders", order,
				"Content-Type: application/json", "Idempotency-Key: k")
		}
		if w := post(app.Outcome{Kind: app.Accepted, OrderID: "ord_2"}, nil); w.Code != 202 || w.Header().Get("Retry-After") != c.want {
			t.Errorf("delay %s: 202 with Retry-After %q, want %q", c.delay, w.Header().Get("Retry-After"), c.want)
		}
		if w := post(app.Outcome{Kind: app.InProgress, OrderID: "ord_3"}, nil); w.Code != 409 || w.Header().Get("Retry-After") != c.want {
			t.Errorf("delay %s: 409 with Retry-After %q, want %q", c.delay, w.Header().Get("Retry-After"), c.want)
		}
		if w := post(app.Outcome{}, app.ErrUnavailable); w.Code != 503 || w.Header().Get("Retry-After") != "1" {
			t.Errorf("delay %s: 503 with Retry-After %q, want 1", c.delay, w.Header().Get("Retry-After"))
		}
		get := do(handler(t, cfg, &fakeService{order: idempotency.Order{Status: idempotency.StatusPending, Body: []byte(`{"status":"pending"}`)}}),
			http.MethodGet, "/v1/orders/ord_1", "")
		if get.Code != 200 || get.Header().Get("Retry-After") != c.want {
			t.Errorf("delay %s: pending order with Retry-After %q, want %q", c.delay, get.Header().Get("Retry-After"), c.want)
		}
		created := do(handler(t, cfg, &fakeService{order: idempotency.Order{Status: idempotency.StatusCreated, Body: []byte(`{"status":"created"}`)}}),
			http.MethodGet, "/v1/orders/ord_1", "")
		if created.Header().Get("Retry-After") != "" {
			t.Errorf("delay %s: a created order with Retry-After %q", c.delay, created.Header().Get("Retry-After"))
		}
	}

	// A pending order accepted a while ago may wait only for the rest of
	// the delay.
	cfg := api.DefaultConfig()
	cfg.DecisionDelay = func() time.Duration { return 8 * time.Second }
	for _, c := range []struct {
		age  time.Duration
		want string
	}{{5500 * time.Millisecond, "3"}, {7500 * time.Millisecond, "1"}, {time.Minute, "1"}, {-2 * time.Second, "8"}} {
		pending := idempotency.Order{Status: idempotency.StatusPending, Body: []byte(`{"status":"pending"}`), AcceptedAt: time.Now().Add(-c.age)}
		get := do(handler(t, cfg, &fakeService{order: pending}), http.MethodGet, "/v1/orders/ord_1", "")
		if get.Header().Get("Retry-After") != c.want {
			t.Errorf("accepted %s ago, a delay of 8s: Retry-After %q, want %q", c.age, get.Header().Get("Retry-After"), c.want)
		}
	}
}

// panicService panics with v in every call, as a bug in the service would.
type panicService struct{ v any }

func (p panicService) Submit(context.Context, app.SubmitOrder) (app.Outcome, error) { panic(p.v) }
func (p panicService) Order(context.Context, string, string, time.Duration) (idempotency.Order, error) {
	panic(p.v)
}
func (p panicService) OrderEvents(context.Context, string, string) ([]byte, error) { panic(p.v) }

// TestPanicIsAnswered500: a panic in a handler answers that request 500
// internal_error as problem+json, counted as a 500 of its route and logged
// with the panic, and the handler serves the next request; the panic net/http
// uses to abort a response is passed on.
func TestPanicIsAnswered500(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	o, err := ops.NewHandler(ops.Config{}, nil, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h, err := api.New(api.Config{}, panicService{v: "index out of range"}, o, reg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		w := do(h, http.MethodPost, "/v1/orders", order, "Content-Type: application/json", "Idempotency-Key: k-panic")
		if w.Code != http.StatusInternalServerError || code(t, w) != problem.CodeInternal || strings.Contains(w.Body.String(), "index out of range") {
			t.Fatalf("POST after a panic: %d %s", w.Code, w.Body)
		}
	}
	if w := do(h, http.MethodGet, "/v1/orders/ord_1", ""); w.Code != http.StatusInternalServerError {
		t.Fatalf("GET after a panic: %d %s", w.Code, w.Body)
	}
	if !strings.Contains(logs.String(), "panic in handler") || !strings.Contains(logs.String(), "index out of range") {
		t.Errorf("the log does not name the panic:\n%s", logs.String())
	}
	if n := counted(t, reg, "orderly_http_requests_total", map[string]string{"method": "POST", "route": "/v1/orders", "code": "500"}); n != 2 {
		t.Errorf("%v POST 500s counted, want 2", n)
	}

	abort, _ := api.New(api.Config{}, panicService{v: http.ErrAbortHandler}, o, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler passed on", v)
		}
	}()
	do(abort, http.MethodPost, "/v1/orders", order, "Content-Type: application/json", "Idempotency-Key: k-abort")
}

// counted is the value of the counter name with labels in reg.
func counted(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
