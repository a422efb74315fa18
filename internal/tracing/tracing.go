// Package tracing carries a W3C trace context (traceparent) across orderly's
// hops: from the HTTP request (or a new one) into the command's NATS headers,
// to the processor, into the event (the CloudEvents distributed-tracing
// extension) and to the projector; it puts the trace into every log line
// written with a context, and exports spans with OpenTelemetry's SDK over
// OTLP/HTTP when an endpoint is configured.
//
// Without an endpoint spans are not recorded (the sampler drops them) but
// still get IDs, so the trace context travels and is logged all the same, at
// the cost of a few random numbers per request.
//
// It imports nothing of orderly.
package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures tracing.
type Config struct {
	// Endpoint is the OTLP/HTTP endpoint spans are exported to, such as
	// http://jaeger:4318; empty exports nothing.
	Endpoint string
	// SampleRatio is the share of traces started here that are recorded,
	// from 0 to 1 (a request whose traceparent says sampled is always
	// recorded, so 0 records only those). Validate refuses other values.
	SampleRatio float64
	// Exporter, when set, receives the spans instead of OTLP (tests).
	Exporter sdktrace.SpanExporter
	// Service names the process in the traces (orderly-api, orderly-serve...).
	Service string
	// Version is the service version.
	Version string
}

// Provider makes tracers.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Validate reports what is wrong with cfg.
func (cfg Config) Validate() error {
	var errs []error
	if !(cfg.SampleRatio >= 0 && cfg.SampleRatio <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("--trace-sample-ratio must be from 0 to 1, got %v", cfg.SampleRatio))
	}
	if cfg.Endpoint != "" {
		// localhost:4318 was taken, and every export then failed ("no Host
		// in request URL"): the scheme is read as what precedes the colon.
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--otlp-endpoint %q: want an http or https URL with a host, such as http://localhost:4318", cfg.Endpoint))
		}
	}
	return errors.Join(errs...)
}

// Start returns the provider of cfg; Shutdown flushes it. A span export
// that fails (the collector down or refusing) is logged to logger, at most
// once a minute with the number of failures since; OpenTelemetry wrote it
// to the standard logger, outside the process's log format.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger != nil {
		otel.SetErrorHandler(&exportErrors{logger: logger, every: time.Minute})
	}
	exp := cfg.Exporter
	if exp == nil && cfg.Endpoint != "" {
		var err error
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(strings.TrimRight(cfg.Endpoint, "/")+"/v1/traces"))
		if err != nil {
			return nil, err
		}
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(resource.NewSchemaless(
		semconv.ServiceName(cfg.Service), semconv.ServiceVersion(cfg.Version)))}
	if exp == nil {
		opts = append(opts, sdktrace.WithSampler(sdktrace.NeverSample()))
	} else {
		// As given: 0 was taken as 1 once, so --trace-sample-ratio=0
		// exported every trace instead of none started here.
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
			sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)))
	}
	return &Provider{tp: sdktrace.NewTracerProvider(opts...)}, nil
}

// exportErrors logs OpenTelemetry's errors (failed exports) at most once per
// every: the first at once, then the last of each period with the count.
type exportErrors struct {
	logger *slog.Logger
	every  time.Duration

	mu         sync.Mutex
	last       time.Time // when one was last logged
	suppressed int
}

func (e *exportErrors) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < e.every {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.logger.Warn("tracing: spans not exported (the OTLP endpoint did not take them); requests are not affected",
		"err", err, "failures_not_logged", n, "logged_at_most_every", e.every)
}

// Tracer is a tracer of the provider; a nil Provider gives one that records
// nothing and makes no IDs.
func (p *Provider) Tracer(name string) trace.Tracer {
	if p == nil {
		return noop.NewTracerProvider().Tracer(name)
	}
	return p.tp.Tracer(name)
}

// Shutdown exports what is buffered and stops.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// propagator is W3C Trace Context.
var propagator = propagation.TraceContext{}

// Extract returns ctx with the remote span context of carrier, if it has one.
func Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return propagator.Extract(ctx, carrier)
}

// Inject writes the span context of ctx into carrier (traceparent, tracestate).
func Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	propagator.Inject(ctx, carrier)
}

// TraceParent is the traceparent and tracestate of ctx's span, empty when
// it has none.
func TraceParent(ctx context.Context) (traceparent, tracestate string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	// What propagation.TraceContext writes, without its map.
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	flags := byte(sc.TraceFlags() & trace.FlagsSampled)
	hex.Encode(b[53:55], []byte{flags})
	return string(b[:]), sc.TraceState().String()
}

// FromTraceParent returns ctx with the remote span context of traceparent.
func FromTraceParent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// MapCarrier is a carrier over a map with the lower-case W3C names.
type MapCarrier map[string]string

func (m MapCarrier) Get(key string) string { return m[strings.ToLower(key)] }
func (m MapCarrier) Set(key, value string) { m[strings.ToLower(key)] = value }
func (m MapCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// HeaderCarrier is a carrier over NATS (or HTTP) headers: it writes the
// lower-case names W3C uses on the wire and reads either case.
type HeaderCarrier map[string][]string

func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (h HeaderCarrier) Set(key, value string) { h[strings.ToLower(key)] = []string{value} }

func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// LogHandler adds trace_id and span_id to every record logged with a context
// that carries a span (slog's *Context methods).
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler { return logHandler{h.Handler.WithGroup(name)} }
