package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// losing is a transport in front of a real orderly. Each of the first lose
// attempts reaches orderly and is answered, and the answer is lost on the
// way back (as when a connection breaks or a client times out); then the
// first fakes are answered in orderly's place, without reaching it; then
// every request goes through.
type losing struct {
	mu    sync.Mutex
	lose  int
	fakes []*http.Response
	sent  int // requests that reached orderly
}

func (l *losing) RoundTrip(req *http.Request) (*http.Response, error) {
	l.mu.Lock()
	var fake *http.Response
	lose := l.lose > 0
	switch {
	case lose:
		l.lose--
	case len(l.fakes) > 0:
		fake, l.fakes = l.fakes[0], l.fakes[1:]
	}
	if fake == nil {
		l.sent++
	}
	l.mu.Unlock()
	if fake != nil {
		fake.Request = req
		return fake, nil
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !lose {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body) // orderly answered in full
	resp.Body.Close()
	return nil, errors.New("connection reset by peer (the answer was lost)")
}

// within is a context that ends after d, or with the test: a client that
// would retry for ever fails the test instead of hanging it.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func answer(status int, retryAfter, code string) *http.Response {
	h := http.Header{"Content-Type": {"application/problem+json"}}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	body := `{"status":` + strconv.Itoa(status) + `,"code":"` + code + `","detail":"a test"}`
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

// TestLostAnswersMakeOneOrder: the answers of the first two attempts are
// lost after orderly made the order; the client retries with the same key
// and gets the order's answer, and orderly made it once.
func TestLostAnswersMakeOneOrder(t *testing.T) {
	t.Parallel()
	ctx := within(t, time.Minute)
	inst := orderlytest.Start(t, orderlytest.Config(t))
	tr := &losing{lose: 2}
	var why []string
	c := &Client{URL: inst.URL, HTTP: &http.Client{Transport: tr}, MinDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond,
		OnRetry: func(_ int, w string, _ time.Duration) { why = append(why, w) }}
	key := NewKey()
	order := orderlytest.Order("c-lost")

	a, err := c.Submit(ctx, key, order)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created() || a.Attempts != 3 || tr.sent != 3 || !a.Replayed || !strings.HasPrefix(a.OrderID, "ord_") {
		t.Fatalf("answer %+v after %d requests, want 201 replayed on the third attempt", a, tr.sent)
	}
	if len(why) != 2 || !strings.Contains(why[0], "answer was lost") {
		t.Errorf("retries because of %q, want the two lost answers", why)
	}
	again, err := c.Submit(ctx, key, order)
	if err != nil || !bytes.Equal(again.Body, a.Body) || again.OrderID != a.OrderID || !again.Replayed || again.Attempts != 1 {
		t.Errorf("the key again: %+v, %v; want the same bytes, replayed, at once", again, err)
	}
	hash := idempotency.KeyHash(api.DefaultTenant, key)
	orderlytest.Eventually(t, 5*time.Second, "the order's event", func() bool {
		return orderlytest.CreatedByKey(t, inst.JetStream(t))[hash] > 0
	})
	if n := orderlytest.CreatedByKey(t, inst.JetStream(t))[hash]; n != 1 {
		t.Errorf("%d OrderCreated for the key, want 1", n)
	}
}

// TestRetriesWhatCannotBeAnsweredYet: a 503 with Retry-After, a 429 without
// one and a 504 are tried again; the order is then made.
func TestRetriesWhatCannotBeAnsweredYet(t *testing.T) {
	t.Parallel()
	ctx := within(t, time.Minute)
	inst := orderlytest.Start(t, orderlytest.Config(t))
	tr := &losing{fakes: []*http.Response{
		answer(http.StatusServiceUnavailable, "0", "outcome_unknown"),
		answer(http.StatusTooManyRequests, "", "too_many_requests"),
		answer(http.StatusGatewayTimeout, "", ""),
	}}
	var why []string
	var delays []time.Duration
	c := &Client{URL: inst.URL, HTTP: &http.Client{Transport: tr}, MinDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond,
		OnRetry: func(_ int, w string, d time.Duration) { why, delays = append(why, w), append(delays, d) }}
	a, err := c.Submit(ctx, NewKey(), orderlytest.Order("c-busy"))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created() || a.Attempts != 4 || a.Replayed || tr.sent != 1 {
		t.Fatalf("answer %+v, %d requests reached orderly; want 201 on the fourth attempt, the only one that reached it", a, tr.sent)
	}
	want := []string{"503 outcome_unknown", "429 too_many_requests", "504 gateway timeout"}
	if strings.Join(why, "|") != strings.Join(want, "|") {
		t.Errorf("retried because of %q, want %q", why, want)
	}
	// Retry-After: 0 is obeyed; without it the delay after the n-th attempt
	// is MinDelay doubled n-1 times (at most MaxDelay), or down to half of it.
	if len(delays) != 3 || delays[0] != 0 || delays[1] < 5*time.Millisecond || delays[1] > 10*time.Millisecond ||
		delays[2] < 10*time.Millisecond || delays[2] > 20*time.Millisecond {
		t.Errorf("delays %v, want 0, then 5-10ms, then 10-20ms", delays)
	}
}

// result is what a call of the client returned.
type result struct {
	a   Answer
	err error
}

// decidedOnceAProcessorStarts runs call on an orderly without a processor,
// waits until the call is about to try again for the first time (the reason
// it heard on retried must start with first: the order is pending), then
// starts a processor on inst and returns what call returns.
func decidedOnceAProcessorStarts(t *testing.T, inst *orderlytest.Instance, retried <-chan string, first string, call func() (Answer, error)) result {
	t.Helper()
	done := make(chan result, 1)
	go func() {
		a, err := call()
		done <- result{a, err}
	}()
	select {
	case w := <-retried:
		if !strings.HasPrefix(w, first) {
			t.Fatalf("first retry because of %q, want %q: the order is pending", w, first)
		}
	case r := <-done:
		t.Fatalf("answered %v, %v without a processor", r.a, r.err)
	case <-time.After(15 * time.Second):
		t.Fatal("no answer to the first attempt within 15 s")
	}
	pcfg := orderlytest.Config(t)
	pcfg.Roles = server.Roles{Processor: true}
	inst.Attach(&pcfg)
	orderlytest.Start(t, pcfg)
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no final answer within 30 s of the processor's start")
	}
	return result{}
}

// TestWaitsOutAPendingOrder: nothing decides the order during the first
// attempt's wait (no processor yet), so it is answered 202; the client
// retries with the same key, a processor starts, and the retry is answered
// with the order's decision.
func TestWaitsOutAPendingOrder(t *testing.T) {
	t.Parallel()
	ctx := within(t, time.Minute)
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true} // no processor yet
	inst := orderlytest.Start(t, cfg)
	retried := make(chan string, 100)
	c := &Client{URL: inst.URL, Wait: time.Second, OnRetry: func(_ int, w string, _ time.Duration) { retried <- w }}
	key := NewKey()
	r := decidedOnceAProcessorStarts(t, inst, retried, "202", func() (Answer, error) {
		return c.Submit(ctx, key, orderlytest.Order("c-pending"))
	})
	if r.err != nil || !r.a.Created() || r.a.Attempts < 2 || !strings.HasPrefix(r.a.OrderID, "ord_") {
		t.Fatalf("answer %+v, %v; want 201 after a retry", r.a, r.err)
	}
	for len(retried) > 0 {
		if w := <-retried; !strings.HasPrefix(w, "202") && !strings.HasPrefix(w, "409") {
			t.Errorf("retried because of %q, want only 202s and 409s of the pending order", w)
		}
	}
	got := orderlytest.Do(t, http.MethodGet, inst.URL+"/v1/orders/"+r.a.OrderID, nil).JSON(t)
	if got["status"] != "created" {
		t.Errorf("GET of the order: %v, want created", got)
	}
	if n := orderlytest.CreatedByKey(t, inst.JetStream(t))[idempotency.KeyHash(api.DefaultTenant, key)]; n != 1 {
		t.Errorf("%d OrderCreated for the key, want 1", n)
	}
}

// TestAcceptThenAwait: Accept returns once the order is stored (202, and
// 409 for the key's next attempt, both naming the order); Await long-polls
// it until a processor, started later, has decided it.
func TestAcceptThenAwait(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true} // no processor yet
	inst := orderlytest.Start(t, cfg)
	c := &Client{URL: inst.URL, Wait: time.Second}
	ctx := within(t, time.Minute)
	key, order := NewKey(), orderlytest.Order("c-async")

	a, err := c.Accept(ctx, key, order)
	if err != nil || a.Status != http.StatusAccepted || a.Attempts != 1 || !strings.HasPrefix(a.OrderID, "ord_") {
		t.Fatalf("Accept: %v, %v; want 202 naming the order", a, err)
	}
	again, err := c.Accept(ctx, key, order)
	if err != nil || again.Status != http.StatusConflict || again.OrderID != a.OrderID || again.Attempts != 1 {
		t.Fatalf("Accept of the key again: %v, %v; want 409 naming %s", again, err, a.OrderID)
	}

	polled := make(chan string, 100)
	c.OnRetry = func(_ int, w string, _ time.Duration) { polled <- w }
	r := decidedOnceAProcessorStarts(t, inst, polled, "200 pending", func() (Answer, error) {
		return c.Await(ctx, a.OrderID)
	})
	if r.err != nil || r.a.Status != http.StatusOK || !r.a.Created() || r.a.OrderID != a.OrderID {
		t.Fatalf("Await: %v, %v; want 200 with the created order %s", r.a, r.err, a.OrderID)
	}
	for len(polled) > 0 {
		if w := <-polled; w != "200 pending" {
			t.Errorf("Await polled again because of %q, want only pending answers", w)
		}
	}
	c.OnRetry = nil
	final, err := c.Accept(ctx, key, order)
	if err != nil || !final.Created() || !final.Replayed || final.OrderID != a.OrderID {
		t.Errorf("Accept once decided: %v, %v; want the order's 201, replayed", final, err)
	}

	_, err = c.Await(ctx, "ord_00000000000000000000000000")
	var p *Problem
	if !errors.As(err, &p) || p.Status != http.StatusNotFound {
		t.Errorf("Await of an order that does not exist: %v, want 404", err)
	}
}

// TestFinalAnswersAreNotRetried: a rejection is the order's answer, not an
// error, and the same bytes again; a wrong request is a *Problem after one
// attempt.
func TestFinalAnswersAreNotRetried(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	c := &Client{URL: inst.URL, OnRetry: func(n int, w string, _ time.Duration) { t.Errorf("attempt %d retried because of %q", n, w) }}
	ctx := within(t, time.Minute)

	rejected := []byte(`{"customer_id":"c-1","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price":5}],"total":6}`)
	key := NewKey()
	a, err := c.Submit(ctx, key, rejected)
	if err != nil || a.Status != http.StatusUnprocessableEntity || a.Created() || a.Attempts != 1 || !bytes.Contains(a.Body, []byte(`"order_rejected"`)) {
		t.Fatalf("rejected order: %+v, %v; want its 422 order_rejected as the answer", a, err)
	}
	again, err := c.Submit(ctx, key, rejected)
	if err != nil || !bytes.Equal(again.Body, a.Body) || !again.Replayed {
		t.Errorf("the rejected order's key again: %+v, %v; want the same bytes, replayed", again, err)
	}

	_, err = c.Submit(ctx, key, orderlytest.Order("c-1"))
	var p *Problem
	if !errors.As(err, &p) || p.Status != http.StatusUnprocessableEntity || p.Code != "idempotency_key_reused" || p.OrderID != a.OrderID {
		t.Errorf("another order under the key: %v, want 422 idempotency_key_reused naming %s", err, a.OrderID)
	}

	a, err = c.Submit(ctx, NewKey(), []byte(`{"customer_id":"","currency":"EUR","items":[]}`))
	if !errors.As(err, &p) || p.Code != "invalid_request" || len(p.Errors) == 0 || a.Attempts != 1 {
		t.Errorf("an invalid order: %+v, %v; want 400 invalid_request naming its fields, after one attempt", a, err)
	} else if !strings.Contains(err.Error(), "customer_id") {
		t.Errorf("the error %q does not name the field", err)
	}

	_, err = (&Client{URL: inst.URL, Token: "x"}).Submit(ctx, NewKey(), orderlytest.Order("c-2"))
	if err != nil {
		t.Errorf("a token where none is configured: %v (orderly without tokens ignores it)", err)
	}
}

// TestGivesUpWithTheOutcomeUnknown: when nothing answers before the context
// ends, the error says that the outcome is unknown and the key must be kept.
func TestGivesUpWithTheOutcomeUnknown(t *testing.T) {
	t.Parallel()
	c := &Client{URL: "http://127.0.0.1:1", MinDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	a, err := c.Submit(ctx, NewKey(), orderlytest.Order("c-1"))
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) || a.Attempts < 2 {
		t.Errorf("answer %+v, %v; want ErrOutcomeUnknown after several attempts", a, err)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header string
		want   time.Duration
		named  bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"8", 8 * time.Second, true},
		{"86400", time.Minute, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0, true},
		{time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), time.Minute, true},
	} {
		got, named := outcome{header: tc.header}.retryAfter()
		if got != tc.want || named != tc.named {
			t.Errorf("Retry-After %q: %v, %t; want %v, %t", tc.header, got, named, tc.want, tc.named)
		}
	}
	if k, l := NewKey(), NewKey(); len(k) != 26 || k == l {
		t.Errorf("keys %q and %q, want two different ones of 26 characters", k, l)
	}
}

// TestProblemMessage: a problem reads as its status, code and detail, then
// each error as "field reason", or only the reason for one about the body
// as a whole (field "": it printed with two spaces before it).
func TestProblemMessage(t *testing.T) {
	var p Problem
	body := `{"status":400,"code":"invalid_request","detail":"the order has 2 error(s)","errors":[{"field":"","reason":"the body must be a JSON object"},{"field":"items[0].sku","reason":"must not be empty"}]}`
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	want := "400 invalid_request: the order has 2 error(s); the body must be a JSON object; items[0].sku must not be empty"
	if got := p.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
