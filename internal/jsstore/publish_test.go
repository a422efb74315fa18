package jsstore_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// TestFastPublishAnswersAsNATSGo: FastPublish's PublishMsg gives the same
// acks and the same errors as nats.go's for a stored message, a duplicate, a
// broken condition and a subject no stream takes.
func TestFastPublishAnswersAsNATSGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := js(t)
	fast := jsstore.FastPublish(plain, 5*time.Second)
	if _, err := plain.CreateStream(ctx, jetstream.StreamConfig{Name: "FAST", Subjects: []string{"fast.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		ack  *jetstream.PubAck
		err  error
		took time.Duration
	}
	publish := func(js jetstream.JetStream, subject, id string, expectLast int64) answer {
		m := &nats.Msg{Subject: subject, Data: []byte("x"), Header: nats.Header{}}
		if id != "" {
			jsstore.SetMsgID(m, id)
		}
		if expectLast >= 0 {
			jsstore.SetExpectLastSubjectSeq(m, uint64(expectLast), "")
		}
		start := time.Now()
		ack, err := js.PublishMsg(ctx, m)
		return answer{ack, err, time.Since(start)}
	}
	for _, tc := range []struct {
		name    string
		subject string
		id      string
		last    int64
		check   func(a answer) bool
	}{
		{"stored", "fast.a", "", -1, func(a answer) bool { return a.err == nil && a.ack.Stream == "FAST" && a.ack.Sequence > 0 }},
		{"first with an ID", "fast.b", "id-1", -1, func(a answer) bool { return a.err == nil && !a.ack.Duplicate }},
		{"duplicate", "fast.b", "id-1", -1, func(a answer) bool { return a.err == nil && a.ack.Duplicate }},
		{"wrong last sequence", "fast.c", "", 7, func(a answer) bool { return jsstore.IsWrongLastSequence(a.err) }},
		{"no stream", "nostream.x", "", -1, func(a answer) bool {
			return errors.Is(a.err, jetstream.ErrNoStreamResponse) && a.took >= 400*time.Millisecond
		}},
	} {
		// The same publish through both, one after the other: the second
		// with its own ID or subject, so both meet the same state.
		p := publish(plain, tc.subject, tc.id, tc.last)
		f := publish(fast, tc.subject, tc.id, tc.last)
		if tc.name == "first with an ID" {
			f = publish(fast, "fast.b2", "id-2", tc.last)
		}
		if !tc.check(p) || !tc.check(f) {
			t.Fatalf("%s: nats.go %+v %v, fast %+v %v", tc.name, p.ack, p.err, f.ack, f.err)
		}
		if (p.err == nil) != (f.err == nil) || (p.err != nil && p.err.Error() != f.err.Error()) {
			t.Fatalf("%s: errors differ: %v / %v", tc.name, p.err, f.err)
		}
		var pa, fa *jetstream.APIError
		if errors.As(p.err, &pa) != errors.As(f.err, &fa) || (pa != nil && !reflect.DeepEqual(*pa, *fa)) {
			t.Fatalf("%s: API errors differ: %+v / %+v", tc.name, pa, fa)
		}
		next := p.ack != nil && (f.ack.Sequence == p.ack.Sequence+1 || p.ack.Duplicate && f.ack.Sequence == p.ack.Sequence) // a duplicate names the original
		if p.ack != nil && f.ack != nil && (p.ack.Stream != f.ack.Stream || p.ack.Duplicate != f.ack.Duplicate || !next) {
			t.Fatalf("%s: acks differ: %+v / %+v", tc.name, p.ack, f.ack)
		}
	}
}

// TestFastPublishNobodyReceivedIt: a publish whose deadline ends while it
// waits to try a subject nobody takes again says that nobody received it
// (ErrNoStreamResponse: nothing stored), where nats.go's says the deadline
// passed, which the API read as "may have been stored" and answered a new
// order outcome_unknown instead of service_unavailable.
func TestFastPublishNobodyReceivedIt(t *testing.T) {
	t.Parallel()
	fast := jsstore.FastPublish(js(t), 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := fast.PublishMsg(ctx, &nats.Msg{Subject: "nostream.y", Data: []byte("x")}); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("a publish nobody received, its deadline passed between tries: %v; want %v", err, jetstream.ErrNoStreamResponse)
	}
}

// Run: go test -run '^$' -bench Publish -benchmem ./internal/jsstore/
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	plain := js(b)
	if _, err := plain.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}}); err != nil {
		b.Fatal(err)
	}
	for name, js := range map[string]jetstream.JetStream{"nats.go": plain, "fast": jsstore.FastPublish(plain, 5*time.Second)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "bench.x", Data: []byte("order")}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
