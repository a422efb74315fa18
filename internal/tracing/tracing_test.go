package tracing_test

import (
	"context"
	"math"
	"strings"
	"testing"

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
		p, err := tracing.Start(context.Background(), tracing.Config{SampleRatio: c.ratio, Exporter: exp, Service: "test"})
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
		if _, err := tracing.Start(context.Background(), tracing.Config{SampleRatio: r, Exporter: tracetest.NewInMemoryExporter()}); err == nil || !strings.Contains(err.Error(), "from 0 to 1") {
			t.Errorf("ratio %v: %v, want a refusal", r, err)
		}
	}
}

// keptSpans keeps its spans at Shutdown, which the in-memory exporter
// forgets them at.
type keptSpans struct{ *tracetest.InMemoryExporter }

func (keptSpans) Shutdown(context.Context) error { return nil }
