package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
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
