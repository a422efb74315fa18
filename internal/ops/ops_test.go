package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/internal/ops"
)

func serve(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	return serveFrom(t, h, "127.0.0.1:40000", method, path)
}

// registryWithACounter is a registry whose /metrics shows orderly_test_total.
func registryWithACounter() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "orderly_test_total", Help: "t"}))
	return reg
}

// serveFrom serves a request from the client at remote, with header lines.
func serveFrom(t *testing.T, h http.Handler, remote, method, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for _, l := range header {
		k, v, _ := strings.Cut(l, ":")
		r.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestMetricsNeedLoopbackOrToken: without a metrics token /metrics answers
// clients on the host only; with one it answers whoever sends it, wherever
// they are, and nobody else, on the host or not.
func TestMetricsNeedLoopbackOrToken(t *testing.T) {
	t.Parallel()
	reg := registryWithACounter()
	open, err := ops.NewHandler(ops.Config{}, nil, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	const token = "m3trics-t0ken-0123456789"
	guarded, err := ops.NewHandler(ops.Config{MetricsToken: token}, nil, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		h      http.Handler
		remote string
		header []string
		want   int
		code   string
	}{
		{"IPv4 loopback", open, "127.0.0.1:40000", nil, 200, ""},
		{"IPv6 loopback", open, "[::1]:40000", nil, 200, ""},
		{"another loopback address", open, "127.8.9.10:40000", nil, 200, ""},
		{"IPv4-mapped loopback", open, "[::ffff:127.0.0.1]:40000", nil, 200, ""},
		{"another host", open, "192.0.2.7:40000", nil, 403, "forbidden"},
		{"another host over IPv6", open, "[2001:db8::7]:40000", nil, 403, "forbidden"},
		{"another host with a token nobody set", open, "192.0.2.7:40000", []string{"Authorization: Bearer " + token}, 403, "forbidden"},
		{"an unparsable address", open, "garbage", nil, 403, "forbidden"},
		{"the token from another host", guarded, "192.0.2.7:40000", []string{"Authorization: Bearer " + token}, 200, ""},
		{"the token, lower-case scheme", guarded, "192.0.2.7:40000", []string{"Authorization: bearer " + token}, 200, ""},
		{"no token from another host", guarded, "192.0.2.7:40000", nil, 401, "unauthorized"},
		{"no token on the host", guarded, "127.0.0.1:40000", nil, 401, "unauthorized"},
		{"a wrong token", guarded, "127.0.0.1:40000", []string{"Authorization: Bearer " + token + "x"}, 401, "unauthorized"},
		{"a prefix of the token", guarded, "127.0.0.1:40000", []string{"Authorization: Bearer " + token[:10]}, 401, "unauthorized"},
		{"another scheme", guarded, "127.0.0.1:40000", []string{"Authorization: Basic " + token}, 401, "unauthorized"},
		{"another scheme as long as Bearer's", guarded, "127.0.0.1:40000", []string{"Authorization: Basic  " + token}, 401, "unauthorized"},
		{"the token without a scheme", guarded, "127.0.0.1:40000", []string{"Authorization: " + token}, 401, "unauthorized"},
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			w := serveFrom(t, tc.h, tc.remote, method, "/metrics", tc.header...)
			if w.Code != tc.want {
				t.Errorf("%s, %s: %d %s, want %d", tc.name, method, w.Code, w.Body, tc.want)
				continue
			}
			if method == http.MethodHead {
				continue
			}
			if tc.want == 200 && !strings.Contains(w.Body.String(), "orderly_test_total") {
				t.Errorf("%s: no metrics in %q", tc.name, w.Body)
			}
			if tc.want != 200 {
				if w.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(w.Body.String(), `"code":"`+tc.code+`"`) ||
					!strings.Contains(w.Body.String(), "--metrics-token-file") || strings.Contains(w.Body.String(), "orderly_test_total") {
					t.Errorf("%s: %v %s, want problem+json %s naming --metrics-token-file", tc.name, w.Header(), w.Body, tc.code)
				}
				if (tc.want == 401) != (w.Header().Get("WWW-Authenticate") != "") {
					t.Errorf("%s: WWW-Authenticate %q with %d", tc.name, w.Header().Get("WWW-Authenticate"), tc.want)
				}
			}
		}
	}
	// A token set again (SIGHUP) replaces the old one; an empty one is
	// refused and changes nothing: a reload never opens /metrics.
	if err := guarded.SetMetricsToken(""); err == nil {
		t.Error("an empty metrics token accepted")
	}
	if w := serveFrom(t, guarded, "192.0.2.7:40000", http.MethodGet, "/metrics"); w.Code != 401 {
		t.Errorf("after the empty token was refused: %d, want 401", w.Code)
	}
	if err := guarded.SetMetricsToken(token + "-new"); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]int{token: 401, token + "-new": 200} {
		if w := serveFrom(t, guarded, "192.0.2.7:40000", http.MethodGet, "/metrics", "Authorization: Bearer "+tok); w.Code != want {
			t.Errorf("after the new token, %q: %d, want %d", tok, w.Code, want)
		}
	}
	// The checks stay open: a probe has no token.
	for _, path := range []string{"/healthz", "/readyz"} {
		if w := serveFrom(t, guarded, "192.0.2.7:40000", http.MethodGet, path); w.Code != 200 {
			t.Errorf("%s from another host with a metrics token set: %d", path, w.Code)
		}
	}
}

func TestReadyzNamesEachCheck(t *testing.T) {
	t.Parallel()
	var failing error
	h, err := ops.NewHandler(ops.Config{}, []ops.Check{
		{Name: "nats", Run: func(context.Context) error { return nil }},
		{Name: "store", Run: func(context.Context) error { return failing }},
	}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := serve(t, h, http.MethodGet, "/readyz")
	var ok struct {
		Status string
		Checks map[string]string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ok); err != nil || w.Code != 200 || ok.Status != "ready" || ok.Checks["nats"] != "ok" || ok.Checks["store"] != "ok" {
		t.Fatalf("ready: %d %s", w.Code, w.Body)
	}
	failing = errors.New("disk full")
	w = serve(t, h, http.MethodGet, "/readyz")
	var p struct {
		Code   string
		Checks map[string]string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 503 || p.Code != "not_ready" || p.Checks["store"] != "disk full" || p.Checks["nats"] != "ok" ||
		w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("not ready: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

func TestHealthzMetricsAndHead(t *testing.T) {
	t.Parallel()
	reg := registryWithACounter()
	h, err := ops.NewHandler(ops.Config{}, nil, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	if w := serve(t, h, http.MethodGet, "/healthz"); w.Code != 200 || w.Body.String() != "{\"status\":\"ok\"}\n" {
		t.Fatalf("healthz: %d %s", w.Code, w.Body)
	}
	if w := serve(t, h, http.MethodHead, "/healthz"); w.Code != 200 {
		t.Fatalf("HEAD healthz: %d", w.Code)
	}
	if w := serve(t, h, http.MethodGet, "/metrics"); w.Code != 200 || !strings.Contains(w.Body.String(), "orderly_test_total") {
		t.Fatalf("metrics: %d", w.Code)
	}
	if w := serve(t, h, http.MethodGet, "/nope"); w.Code != 404 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("unknown path: %d %v", w.Code, w.Header())
	}
	// The path comes back quoted and cut short (problem.Quoted).
	if w := serve(t, h, http.MethodGet, "/%1b[2J"+strings.Repeat("x", 4000)); w.Code != 404 ||
		!strings.Contains(w.Body.String(), `no resource at \"/\\x1b[2Jxxx`) || w.Body.Len() > 400 {
		t.Fatalf("hostile path: %d %.300s", w.Code, w.Body)
	}
	if _, err := ops.NewHandler(ops.Config{}, []ops.Check{{Name: ""}}, nil, reg); err == nil {
		t.Fatal("a check without a name accepted")
	}
}

func TestHealthzFailsOnALivenessCheck(t *testing.T) {
	t.Parallel()
	var dead error
	h, err := ops.NewHandler(ops.Config{}, nil, []ops.Check{{Name: "store", Run: func(context.Context) error { return dead }}}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if w := serve(t, h, http.MethodGet, "/healthz"); w.Code != 200 {
		t.Fatalf("live: %d", w.Code)
	}
	dead = errors.New("store stopped writing")
	w := serve(t, h, http.MethodGet, "/healthz")
	var p struct {
		Code   string
		Checks map[string]string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 503 || p.Code != "not_live" || p.Checks["store"] != "store stopped writing" {
		t.Fatalf("not live: %d %s", w.Code, w.Body)
	}
}

// TestBearerToken: the Bearer scheme in any case with one space and a
// token; anything else is no token.
func TestBearerToken(t *testing.T) {
	t.Parallel()
	for auth, want := range map[string]string{
		"Bearer abc":  "abc",
		"bearer abc":  "abc",
		"BEARER a b":  "a b", // the token's own form is the lookup's to judge
		"Bearer  abc": " abc",
	} {
		if got, ok := ops.BearerToken(auth); !ok || got != want {
			t.Errorf("%q: %q %v, want %q", auth, got, ok, want)
		}
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Basic abc", "Basic  abc", "Bearerabc", "abc", "Bearer\tabc"} {
		if got, ok := ops.BearerToken(auth); ok {
			t.Errorf("%q: token %q", auth, got)
		}
	}
}
