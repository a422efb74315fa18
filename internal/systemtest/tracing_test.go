package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
	"github.com/orderly-dev/orderly/processor"
)

// spansOf waits until the exporter holds spans named as want in trace, and
// returns them by name.
func spansOf(t *testing.T, exp *tracetest.InMemoryExporter, trace string, want ...string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	got := map[string]sdktrace.ReadOnlySpan{}
	orderlytest.Eventually(t, 10*time.Second, "the spans of trace "+trace, func() bool {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.SpanContext().TraceID().String() == trace {
				name := s.Name()
				if strings.HasPrefix(name, "project ") {
					name = "project"
				}
				got[name] = s
			}
		}
		for _, w := range want {
			if _, ok := got[w]; !ok {
				return false
			}
		}
		return true
	})
	return got
}

// TestTraceTravelsFromTheRequestToTheEventsAndTheLogs: a request's W3C
// traceparent (or a new one) is the parent of the API's span, travels in the
// command's headers to the processor and the projector (whose spans join the
// trace), is in the event as the CloudEvents traceparent extension, and is in
// every log line about the order.
func TestTraceTravelsFromTheRequestToTheEventsAndTheLogs(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	logs := &orderlytest.Buffer{}
	cfg := orderlytest.Config(t)
	cfg.Tracing.Exporter = exp
	cfg.Roles = server.Roles{API: true, Processor: true, Projector: true} // the optional projector too: its span is the processor's child
	cfg.Processor.MaxAttempts = 2
	cfg.ProcessorHooks = processor.Hooks{BeforeClaim: func(_ context.Context, cmd events.CreateOrder, _ int) error {
		if cmd.Request.CustomerID == "c-poison" {
			return errors.New("injected: poison")
		}
		return nil
	}}
	inst := orderlytest.StartLogged(t, cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	js := inst.JetStream(t)

	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := inst.PostOrder(t, "traced-1", orderlytest.Order("c-1"), "traceparent: 00-"+trace+"-"+parent+"-01", "Prefer: wait=10")
	if r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	orderID, _ := r.JSON(t)["id"].(string)

	// The answer is the stored response; the event follows it (ADR 0009).
	var ev events.RawEvent
	orderlytest.Eventually(t, 10*time.Second, "the order's event", func() bool {
		for _, e := range orderlytest.Events(t, js) {
			if e.Subject == orderID {
				ev = e
			}
		}
		return ev.Subject == orderID
	})
	if !strings.HasPrefix(ev.TraceParent, "00-"+trace+"-") {
		t.Fatalf("the event's traceparent is %q, want trace %s", ev.TraceParent, trace)
	}
	seq, _ := events.OrderSeq(orderID)
	commands, err := js.Stream(context.Background(), events.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := commands.GetMsg(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	if tp := cmd.Header.Get("traceparent"); !strings.HasPrefix(tp, "00-"+trace+"-") {
		t.Fatalf("the command's traceparent header is %q", tp)
	}
	spans := spansOf(t, exp, trace, "POST /v1/orders", "process CreateOrder", "project")
	if p := spans["POST /v1/orders"].Parent().SpanID().String(); p != parent {
		t.Fatalf("the API span's parent is %s, want the request's %s", p, parent)
	}
	if spans["process CreateOrder"].Parent().SpanID() != spans["POST /v1/orders"].SpanContext().SpanID() {
		t.Fatalf("the processor's span is not the child of the API's")
	}
	if spans["project"].Parent().SpanID() != spans["process CreateOrder"].SpanContext().SpanID() {
		t.Fatalf("the projector's span is not the child of the processor's")
	}

	// Without a traceparent, a new trace does the same journey.
	r = inst.PostOrder(t, "traced-2", orderlytest.Order("c-2"), "Prefer: wait=10")
	orderID, _ = r.JSON(t)["id"].(string)
	orderlytest.Eventually(t, 10*time.Second, "the order's event", func() bool {
		for _, e := range orderlytest.Events(t, js) {
			if e.Subject == orderID {
				ev = e
			}
		}
		return ev.Subject == orderID
	})
	fresh := strings.Split(ev.TraceParent, "-")
	if len(fresh) != 4 || fresh[1] == trace {
		t.Fatalf("a request without traceparent: event traceparent %q", ev.TraceParent)
	}
	spansOf(t, exp, fresh[1], "POST /v1/orders", "process CreateOrder", "project")

	// The lines logged about an order carry its trace.
	const poisoned = "5bf92f3577b34da6a3ce929d0e0e4737"
	r = inst.PostOrder(t, "traced-3", orderlytest.Order("c-poison"), "traceparent: 00-"+poisoned+"-"+parent+"-01", "Prefer: wait=20")
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	orderlytest.Eventually(t, 10*time.Second, "the dead letter's log line", func() bool { return strings.Contains(logs.String(), "message dead-lettered") })
	for _, msg := range []string{"order rejected as processing_failed", "message dead-lettered", "handler failed; redelivering later"} {
		found := false
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
				found = true
				if rec["trace_id"] != poisoned {
					t.Errorf("%q logged with trace_id %v, want %s", msg, rec["trace_id"], poisoned)
				}
			}
		}
		if !found {
			t.Errorf("no %q line in the log", msg)
		}
	}
}
