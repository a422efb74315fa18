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
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "orderly_test_total", Help: "t"}))
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
