package tracing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-dev/orderly/internal/tracing"
)

// TestTraceParentIsWhatThePropagatorWrites: the hand-made traceparent is
// byte for byte what W3C propagation writes, sampled or not, and reads back.
func TestTraceParentIsWhatThePropagatorWrites(t *testing.T) {
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled} {
		ts, _ := trace.ParseTraceState("vendor=x")
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xff},
			SpanID:  trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: flags, TraceState: ts, Remote: true,
		})
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		want := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, want)
		tp, st := tracing.TraceParent(ctx)
		if tp != want["traceparent"] || st != want["tracestate"] {
			t.Fatalf("flags %v: %q %q, want %q %q", flags, tp, st, want["traceparent"], want["tracestate"])
		}
		back := trace.SpanContextFromContext(tracing.FromTraceParent(context.Background(), tp, st))
		if !back.Equal(sc) {
			t.Fatalf("read back %v, want %v", back, sc)
		}
	}
	if tp, _ := tracing.TraceParent(context.Background()); tp != "" {
		t.Fatalf("no span: %q", tp)
	}
}

// TestSampleRatioIsTakenAsGiven: a ratio of 0 exports none of the traces
// started here and still every one whose parent was sampled (it was taken
// as 1, so --trace-sample-ratio=0 exported them all); 1 exports every one;
// a ratio outside 0 to 1 is refused.
func TestSampleRatioIsTakenAsGiven(t *testing.T) {
	sampledParent := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	for _, c := range []struct {
		ratio float64
		want  int // spans exported of the two: one started here, one of a sampled parent
	}{{0, 1}, {1, 2}} {
		exp := keptSpans{tracetest.NewInMemoryExporter()}
		p, err := tracing.Start(context.Background(), tracing.Config{SampleRatio: c.ratio, Exporter: exp, Service: "test"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr := p.Tracer("test")
		_, own := tr.Start(context.Background(), "started here")
		own.End()
		_, child := tr.Start(sampledParent, "of a sampled parent")
		child.End()
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := len(exp.GetSpans()); got != c.want {
			t.Errorf("ratio %v: %d spans exported, want %d", c.ratio, got, c.want)
		}
	}
	for _, r := range []float64{-0.1, 1.5, math.NaN()} {
		if _, err := tracing.Start(context.Background(), tracing.Config{SampleRatio: r, Exporter: tracetest.NewInMemoryExporter()}, nil); err == nil || !strings.Contains(err.Error(), "from 0 to 1") {
			t.Errorf("ratio %v: %v, want a refusal", r, err)
		}
	}
}

// keptSpans keeps its spans at Shutdown, which the in-memory exporter
// forgets them at.
type keptSpans struct{ *tracetest.InMemoryExporter }

func (keptSpans) Shutdown(context.Context) error { return nil }

// TestOTLPEndpointIsAURL: an endpoint without a scheme (localhost:4318) was
// taken, and every export failed; it is refused, as is one without a host.
func TestOTLPEndpointIsAURL(t *testing.T) {
	for endpoint, ok := range map[string]bool{
		"":                        true,
		"http://localhost:4318":   true,
		"https://otel.example/":   true,
		"http://10.0.0.7:4318/x/": true,
		"localhost:4318":          false,
		"otel.example":            false,
		"ftp://otel.example":      false,
		"http://":                 false,
		"http//localhost:4318":    false,
		"http://[::1":             false,
	} {
		err := tracing.Config{Endpoint: endpoint, SampleRatio: 1}.Validate()
		if (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "such as http://localhost:4318") {
			t.Errorf("endpoint %q: %v, want accepted %v", endpoint, err, ok)
		}
	}
}

// TestSpansReachTheOTLPEndpoint: with an endpoint, spans are exported over
// OTLP/HTTP to its /v1/traces (a trailing slash of the endpoint taken as
// none), as protobuf, with the service's name.
func TestSpansReachTheOTLPEndpoint(t *testing.T) {
	got := make(chan *collectortrace.ExportTraceServiceRequest, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
			t.Errorf("%s %s (%s), %d bytes: not an OTLP export", r.Method, r.URL.Path, r.Header.Get("Content-Type"), len(body))
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		got <- &req
	}))
	defer srv.Close()
	p, err := tracing.Start(context.Background(), tracing.Config{Endpoint: srv.URL + "/", SampleRatio: 1, Service: "orderly-test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("test").Start(context.Background(), "POST /v1/orders")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-got:
		rs := req.GetResourceSpans()
		if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || rs[0].GetScopeSpans()[0].GetSpans()[0].GetName() != "POST /v1/orders" ||
			!strings.Contains(rs[0].GetResource().String(), "orderly-test") {
			t.Errorf("exported %v", req)
		}
	default:
		t.Fatal("no export reached the endpoint")
	}
}

// TestFailedExportsAreLoggedOnce: an endpoint that refuses the spans is
// logged to the process's log, once for several failures in a row (they
// went to Go's standard logger, one line for each, outside the process's
// log format).
func TestFailedExportsAreLoggedOnce(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "refused", http.StatusBadRequest)
	}))
	defer srv.Close()
	var log bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))
	p, err := tracing.Start(context.Background(), tracing.Config{Endpoint: srv.URL, SampleRatio: 1}, logger)
	if err != nil {
		t.Fatal(err)
	}
	tr := p.Tracer("test")
	for range 3 { // three batches, a second apart (the batch timeout)
		_, span := tr.Start(context.Background(), "request")
		span.End()
		time.Sleep(1200 * time.Millisecond)
	}
	_ = p.Shutdown(context.Background()) // its own export, of nothing left, may fail too
	mu.Lock()
	defer mu.Unlock()
	if n := posts.Load(); n < 2 {
		t.Fatalf("%d exports reached the endpoint, want one per batch", n)
	}
	if lines := strings.Count(log.String(), "spans not exported"); lines != 1 || !strings.Contains(log.String(), "level=WARN") {
		t.Errorf("%d exports failed, logged in %d lines:\n%s", posts.Load(), lines, log.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
