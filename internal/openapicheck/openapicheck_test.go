package openapicheck_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/openapicheck"
)

// TestCheckFindsEachViolation answers requests with made-up responses, one
// broken way each, and asks the OpenAPI check to name each one and to pass
// the responses the document allows.
func TestCheckFindsEachViolation(t *testing.T) {
	check, err := openapicheck.New()
	if err != nil {
		t.Fatal(err)
	}
	const (
		order   = `{"id":"ord_01ARZ3NDEKTSV4RRFFQ69G5FAV","status":"created","customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price":1}],"total":1,"accepted_at":"2026-12-07T00:00:00Z","created_at":"2026-12-07T00:00:00Z"}`
		problem = `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found"}`
	)
	pending := func(status string) string {
		return `{"id":"ord_01ARZ3NDEKTSV4RRFFQ69G5FAV","status":"` + status + `"}`
	}
	type answer struct {
		status int
		header map[string]string
		body   string
	}
	cases := []struct {
		name, method, path string
		answer             answer
		want               string // "" when the response is valid
	}{
		{"a valid order", "GET", "/v1/orders/ord_01ARZ3NDEKTSV4RRFFQ69G5FAV",
			answer{200, map[string]string{"Content-Type": "application/json"}, order}, ""},
		{"a valid problem", "GET", "/v1/orders/nope",
			answer{404, map[string]string{"Content-Type": "application/problem+json"}, problem}, ""},
		{"a status the operation does not declare", "GET", "/v1/orders/nope",
			answer{418, map[string]string{"Content-Type": "application/problem+json"}, problem}, "status 418 is not declared"},
		{"a body that breaks its schema", "GET", "/v1/orders/nope",
			answer{404, map[string]string{"Content-Type": "application/problem+json"}, `{"type":"about:blank","title":"x","status":404,"code":"no_such_code"}`}, "code"},
		{"a body without a required field", "GET", "/v1/orders/nope",
			answer{404, map[string]string{"Content-Type": "application/problem+json"}, `{"type":"about:blank","title":"x","status":404}`}, "code"},
		{"a media type the response does not declare", "GET", "/v1/orders/nope",
			answer{404, map[string]string{"Content-Type": "text/plain"}, problem}, `content type "text/plain" is not declared`},
		{"a header that breaks its schema", "GET", "/v1/orders/nope",
			answer{503, map[string]string{"Content-Type": "application/problem+json", "Retry-After": "soon"}, strings.Replace(problem, "not_found", "service_unavailable", 1)}, "header Retry-After"},
		{"a header's value against its schema", "GET", "/v1/orders/nope",
			answer{503, map[string]string{"Content-Type": "application/problem+json", "Retry-After": "5"}, strings.Replace(problem, "not_found", "service_unavailable", 1)}, ""},
		{"a header the document gives by $ref, breaking its pattern", "POST", "/v1/orders",
			answer{202, map[string]string{"Content-Type": "application/json", "Location": "/elsewhere"}, pending("pending")}, "header Location"},
		{"a header the document gives by $ref, keeping its pattern", "POST", "/v1/orders",
			answer{202, map[string]string{"Content-Type": "application/json", "Location": "/v1/orders/ord_01ARZ3NDEKTSV4RRFFQ69G5FAV"}, pending("pending")}, ""},
		{"a body that is not JSON", "GET", "/v1/orders/nope",
			answer{404, map[string]string{"Content-Type": "application/problem+json"}, `not found`}, "not JSON"},
		{"a date-time that is none", "GET", "/v1/orders/ord_01ARZ3NDEKTSV4RRFFQ69G5FAV",
			answer{200, map[string]string{"Content-Type": "application/json"}, strings.Replace(order, `"accepted_at":"2026-12-07T00:00:00Z"`, `"accepted_at":"yesterday"`, 1)}, "accepted_at"},
		{"a const broken", "POST", "/v1/orders",
			answer{202, map[string]string{"Content-Type": "application/json"}, pending("created")}, "status"},
		{"a const kept", "POST", "/v1/orders",
			answer{202, map[string]string{"Content-Type": "application/json"}, pending("pending")}, ""},
		{"a response the document gives by $ref, its body broken", "GET", "/v1/orders/nope",
			answer{401, map[string]string{"Content-Type": "application/problem+json", "WWW-Authenticate": "Bearer"}, `{"type":"about:blank","title":"x","status":401}`}, "code"},
		{"a media type with parameters", "GET", "/metrics",
			answer{200, map[string]string{"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}, "# HELP x\n"}, ""},
		{"a HEAD with a status its operation does not declare", "HEAD", "/v1/orders/nope",
			answer{418, nil, ""}, "status 418 is not declared"},
		{"a HEAD with a declared status", "HEAD", "/v1/orders/nope",
			answer{404, nil, ""}, ""},
		{"an undocumented path answered 200", "GET", "/v1/secret",
			answer{200, map[string]string{"Content-Type": "application/json"}, `{}`}, "does not list"},
		{"an undocumented path answered with a problem", "GET", "/v1/secret",
			answer{404, map[string]string{"Content-Type": "application/problem+json"}, problem}, ""},
		{"an undocumented method answered 200", "DELETE", "/v1/orders/nope",
			answer{200, map[string]string{"Content-Type": "application/json"}, `{}`}, "does not list"},
		{"a trailing slash answered 200", "GET", "/healthz/",
			answer{200, map[string]string{"Content-Type": "application/json"}, `{"status":"ok"}`}, "does not list"},
	}
	// The request names its case: the handler's goroutine reads only what
	// was written before the server started.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.Header.Get("Test-Case"))
		if err != nil || i < 0 || i >= len(cases) {
			http.Error(w, "no such case", http.StatusBadRequest)
			return
		}
		a := cases[i].answer
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i, c := range cases {
		req, err := http.NewRequest(c.method, srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Test-Case", strconv.Itoa(i))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		violation := check(req, resp)
		resp.Body.Close()
		switch {
		case c.want == "" && violation != nil:
			t.Errorf("%s: a violation: %v", c.name, violation)
		case c.want != "" && violation == nil:
			t.Errorf("%s: no violation found", c.name)
		case c.want != "" && !strings.Contains(violation.Error(), c.want):
			t.Errorf("%s: violation %q does not name %q", c.name, violation, c.want)
		}
	}
}

// BenchmarkCheck: the cost of the check of one response, an order (200)
// with a body to validate; the tests' load generators pay it per request.
func BenchmarkCheck(b *testing.B) {
	check, err := openapicheck.New()
	if err != nil {
		b.Fatal(err)
	}
	const order = `{"id":"ord_01ARZ3NDEKTSV4RRFFQ69G5FAV","status":"created","customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price":1}],"total":1,"accepted_at":"2026-12-07T00:00:00Z","created_at":"2026-12-07T00:00:00Z"}`
	req := httptest.NewRequest("GET", "/v1/orders/ord_01ARZ3NDEKTSV4RRFFQ69G5FAV", nil)
	for b.Loop() {
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(order))}
		if err := check(req, resp); err != nil {
			b.Fatal(err)
		}
	}
}
