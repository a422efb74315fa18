package bench

import (
	"bytes"
	"container/heap"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/orderly-dev/orderly/internal/readlimit"
)

// pendingOrder is an accepted order a polling client follows.
type pendingOrder struct {
	loc      string    // its Location
	accepted time.Time // when its 202 came
	due      time.Time // when to ask next
}

// pendingOrders is a client's followed orders, the earliest due first.
type pendingOrders []pendingOrder

func (p pendingOrders) Len() int           { return len(p) }
func (p pendingOrders) Less(i, j int) bool { return p[i].due.Before(p[j].due) }
func (p pendingOrders) Swap(i, j int)      { p[i], p[j] = p[j], p[i] }
func (p *pendingOrders) Push(x any)        { *p = append(*p, x.(pendingOrder)) }
func (p *pendingOrders) Pop() any {
	old := *p
	o := old[len(old)-1]
	*p = old[:len(old)-1]
	return o
}

// poller is one client's polling state and what it saw.
type poller struct {
	pending pendingOrders
	orders  int
	polls   int
	errors  int
	decided []time.Duration
	every   time.Duration // Config.PollEvery
	get     func(ctx context.Context, loc string) (status int, header http.Header, body []byte, err error)
}

// follow starts following an accepted order whose 202 came at now with
// header h.
func (p *poller) follow(now time.Time, h http.Header) {
	loc := h.Get("Location")
	if loc == "" {
		return
	}
	p.orders++
	heap.Push(&p.pending, pendingOrder{loc: loc, accepted: now, due: now.Add(p.wait(h))})
}

// wait is how long to wait before asking again, after an answer with h.
func (p *poller) wait(h http.Header) time.Duration {
	if p.every > 0 {
		return p.every
	}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	return time.Second
}

// due says whether an order is due at now.
func (p *poller) due(now time.Time) bool {
	return len(p.pending) > 0 && !p.pending[0].due.After(now)
}

// pollNext asks for the earliest due order once: decided, it is done;
// pending, it is asked again after the answer's Retry-After.
func (p *poller) pollNext(ctx context.Context) {
	o := heap.Pop(&p.pending).(pendingOrder)
	status, h, body, err := p.get(ctx, o.loc)
	if ctx.Err() != nil && err != nil {
		heap.Push(&p.pending, o) // cut by the deadline: not an answer
		return
	}
	p.polls++
	now := time.Now()
	switch {
	case err != nil || status != http.StatusOK:
		p.errors++
		o.due = now.Add(time.Second)
	case bytes.Contains(body, []byte(`"status":"pending"`)):
		o.due = now.Add(p.wait(h))
	default:
		p.decided = append(p.decided, now.Sub(o.accepted))
		return
	}
	heap.Push(&p.pending, o)
}

// drain polls what is still pending until it is decided or ctx ends.
func (p *poller) drain(ctx context.Context) {
	for len(p.pending) > 0 && ctx.Err() == nil {
		if wait := time.Until(p.pending[0].due); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		p.pollNext(ctx)
	}
}

// get sends GET loc and returns its status, header and body; an answer
// longer than maxAnswer is an error, not an order.
func (r *run) get(ctx context.Context, loc string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.URL+loc, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := readlimit.ReadAll(resp.Body, maxAnswer)
	return resp.StatusCode, resp.Header, body, err
}

// pollResult sums what the clients saw.
func pollResult(ps []*poller) *PollResult {
	res := &PollResult{}
	var seen []time.Duration
	for _, p := range ps {
		res.Orders += p.orders
		res.Polls += p.polls
		res.Errors += p.errors
		seen = append(seen, p.decided...)
	}
	res.Decided = len(seen)
	if res.Orders > 0 {
		res.PerOrder = float64(res.Polls) / float64(res.Orders)
	}
	res.SeenDecided = PercentilesOf(seen)
	return res
}
