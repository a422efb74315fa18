package jsstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestCutOff(t *testing.T) {
	cut := fmt.Errorf("account info: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"})
	noLeader := &jetstream.APIError{Code: 503, ErrorCode: 10009, Description: "JetStream cluster can not handle request"}
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type step struct {
		at   float64
		err  error
		move bool
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"cut off for After: move", []step{{0, cut, false}, {5, cut, false}, {9.9, cut, false}, {10, cut, true}}},
		{"then the count starts again", []step{{0, cut, false}, {10, cut, true}, {11, cut, false}, {20.9, cut, false}, {21, cut, true}}},
		{"an answer ends the run", []step{{0, cut, false}, {6, nil, false}, {7, cut, false}, {16, cut, false}, {17, cut, true}}},
		{"another API error ends it", []step{{0, cut, false}, {6, noLeader, false}, {7, cut, false}, {16, cut, false}, {17, cut, true}}},
		{"a timeout neither ends nor extends it", []step{{0, cut, false}, {5, context.DeadlineExceeded, false}, {10, context.DeadlineExceeded, false}, {10.5, cut, true}}},
		{"timeouts alone never move", []step{{0, context.DeadlineExceeded, false}, {30, context.DeadlineExceeded, false}}},
		{"other errors never move", []step{{0, noLeader, false}, {30, noLeader, false}, {60, errors.New("no"), false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			co := CutOff{After: 10 * time.Second}
			for _, s := range c.steps {
				if got := co.Observe(s.err, at(s.at)); got != s.move {
					t.Fatalf("at %.1fs (%v): move %v, want %v", s.at, s.err, got, s.move)
				}
			}
		})
	}
}
