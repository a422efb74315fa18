package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/tracing"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	outcomes *prometheus.CounterVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_http_requests_total",
			Help: "HTTP requests by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orderly_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"method", "route"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_order_submissions_total",
			Help: "POST /v1/orders that reached the order store, by outcome: created, rejected, accepted (202), in_progress (409), and replayed when answered from a stored result.",
		}, []string{"outcome", "replayed"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.outcomes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every outcome is exposed at 0 from the start: a series that appears at
	// 1 shows Prometheus no increase, so rate() would miss the first of each.
	for _, o := range []string{outcomeCreated, outcomeRejected, outcomeAccepted, outcomeInProgress} {
		for _, replayed := range []bool{false, true} {
			m.outcomes.WithLabelValues(o, strconv.FormatBool(replayed))
		}
	}
	// So is every response the OpenAPI document names (route, method and
	// status code): an alert on 5xx sees the first one.
	responses, err := documentedResponses(openAPI)
	if err != nil {
		return nil, err
	}
	for _, r := range responses {
		m.requests.WithLabelValues(r.method, r.route, r.code)
		m.duration.WithLabelValues(r.method, r.route)
	}
	return m, nil
}

type documentedResponse struct{ method, route, code string }

// documentedResponses lists every response of an OpenAPI document, its path
// written as the router's route ("/v1/orders/{id}" as "/v1/orders/:id").
func documentedResponses(doc []byte) ([]documentedResponse, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("api: the OpenAPI document: %w", err)
	}
	var out []documentedResponse
	for path, ops := range d.Paths {
		route := strings.NewReplacer("{", ":", "}", "").Replace(path)
		for method, raw := range ops {
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if json.Unmarshal(raw, &op) != nil || op.Responses == nil {
				continue // parameters and the like, not an operation
			}
			for code := range op.Responses {
				out = append(out, documentedResponse{methodLabel(strings.ToUpper(method)), route, code})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("api: the OpenAPI document names no response")
	}
	return out, nil
}

// The outcomes of orderly_order_submissions_total.
const (
	outcomeCreated    = "created"
	outcomeRejected   = "rejected"
	outcomeAccepted   = "accepted"
	outcomeInProgress = "in_progress"
)

func (h *handlers) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	method := methodLabel(c.Request.Method)
	h.metrics.requests.WithLabelValues(method, route, strconv.Itoa(c.Writer.Status())).Inc()
	h.metrics.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
}

// methodLabel bounds the method label: a client may send any token as its
// method, and each new label value is a new series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

func (m *httpMetrics) outcome(out app.Outcome) {
	var o string
	switch out.Kind {
	case app.Completed:
		o = outcomeCreated
		if out.Record.Status != http.StatusCreated {
			o = outcomeRejected
		}
	case app.Accepted:
		o = outcomeAccepted
	case app.InProgress:
		o = outcomeInProgress
	}
	m.outcomes.WithLabelValues(o, strconv.FormatBool(out.Replayed)).Inc()
}

// trace starts the request's server span (see Config.Tracer).
func (h *handlers) trace(c *gin.Context) {
	if h.cfg.Tracer == nil {
		return
	}
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	ctx := tracing.Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
	ctx, span := h.cfg.Tracer.Start(ctx, methodLabel(c.Request.Method)+" "+route, trace.WithSpanKind(trace.SpanKindServer))
	c.Request = c.Request.WithContext(ctx)
	c.Next()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", c.Writer.Status()))
		if c.Writer.Status() >= 500 {
			span.SetStatus(codes.Error, http.StatusText(c.Writer.Status()))
		}
	}
	span.End()
}
