package server

import (
	"errors"
	"testing"
	"time"
)

// TestSilence: the process moves once its pings (one a second, each waited
// for a second) have gone unanswered for silentAfter since the first of
// them was sent; an answered ping ends the run, and after a move the count
// starts again.
func TestSilence(t *testing.T) {
	t.Parallel()
	timeout := errors.New("nats: timeout")
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type ping struct {
		sent float64 // its answer, or its timeout, a second later
		err  error
		move bool
	}
	unanswered := func(from, to float64, moveAt float64) []ping {
		var ps []ping
		for s := from; s <= to; s++ {
			ps = append(ps, ping{s, timeout, s == moveAt})
		}
		return ps
	}
	for _, c := range []struct {
		name  string
		pings []ping
	}{
		{"unanswered for 5 s: move", unanswered(0, 4, 4)},
		{"then the count starts again", append(unanswered(0, 4, 4), unanswered(5, 9, 9)...)},
		{"an answer ends the run", append(append(unanswered(0, 2, -1), ping{3, nil, false}), unanswered(4, 8, 8)...)},
		{"answered pings never move", []ping{{0, nil, false}, {1, nil, false}, {10, nil, false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := silence{after: silentAfter}
			for _, p := range c.pings {
				if got := q.observe(p.err, at(p.sent), at(p.sent+1)); got != p.move {
					t.Fatalf("ping sent at %.0fs (%v): move %v, want %v", p.sent, p.err, got, p.move)
				}
			}
		})
	}
}
