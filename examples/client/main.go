// Command client submits an order to orderly the way a client that must
// neither lose an order nor make it twice does, as docs/http-contract.md
// tells it to:
//
//   - one Idempotency-Key per logical order, made before the first attempt
//     and kept with the order until its answer is final (a client that
//     crashes in between submits again with the key it kept);
//   - the same body on every attempt: another body under the key is 422
//     idempotency_key_reused;
//   - Prefer: wait=N, so that most orders are answered with their decision;
//   - a retry after a network error, a timeout, 408, 429 or any 5xx, after
//     the answer's Retry-After or a growing delay with jitter;
//   - a retry of a 202 (stored, not decided within the wait) or a 409 (an
//     earlier attempt of the key is still pending) too: with Prefer: wait=N
//     the retry waits for the original's decision and replays its answer;
//   - 201 and 422 order_rejected are the order's final answer, the same
//     bytes for every retry; any other 4xx is final as well (the request
//     itself is wrong, and nothing was stored for it).
//
// Run it against orderly serve with an order on standard input:
//
//	echo '{"customer_id":"c-42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}]}' |
//	  go run ./examples/client --url http://127.0.0.1:8080
//
// With --async it has the order accepted at once (Prefer: respond-async,
// 202) and then long-polls it (GET /v1/orders/{id}?wait=), as a client that
// submits many orders and collects their decisions later would.
//
// It prints the answer's status, the order's ID and the body, and exits 1 when
// the order was refused or its outcome is unknown (run it again with the key
// it printed: never with a new one).
package main

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8080", "base URL of the orderly API")
	key := flag.String("key", "", "idempotency key of the order (default: a new random one; give the printed one to submit the same order again)")
	tokenFile := flag.String("token-file", "", "file holding the bearer token, when the API has tokens")
	async := flag.Bool("async", false, "have the order accepted at once (202), then long-poll it until it is decided")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to keep trying before the outcome is left unknown")
	flag.Parse()

	order, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		log.Fatal(err)
	}
	c := &Client{URL: *base, OnRetry: func(n int, why string, delay time.Duration) {
		log.Printf("attempt %d: %s; again in %s", n, why, delay.Round(time.Millisecond))
	}}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			log.Fatal(err)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	if *key == "" {
		*key = NewKey()
	}
	log.Printf("idempotency key %s", *key)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var a Answer
	if *async {
		a, err = c.Accept(ctx, *key, order)
		if err == nil && (a.Status == http.StatusAccepted || a.Status == http.StatusConflict) {
			log.Printf("accepted: %s", a)
			a, err = c.Await(ctx, a.OrderID)
		}
	} else {
		a, err = c.Submit(ctx, *key, order)
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		log.Fatalf("%v\nto learn the outcome, run again with --key %s", err, *key)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a)
	if !a.Created() {
		os.Exit(1)
	}
}

// NewKey returns a new idempotency key: 26 random characters (130 bits).
func NewKey() string { return crand.Text() }

// Client submits orders to one orderly API. Its zero value, with URL set, is
// ready to use; it is safe for concurrent use.
type Client struct {
	// URL is the API's base URL, such as http://127.0.0.1:8080.
	URL string
	// Token is the bearer token, when the API has tokens (--tokens-file).
	Token string
	// HTTP sends the requests (default: a client whose attempts time out
	// after Wait plus 20 s).
	HTTP *http.Client
	// Wait is what each attempt asks orderly to wait for the decision
	// (Prefer: wait; default 10 s, capped by the server's --max-wait).
	Wait time.Duration
	// MinDelay and MaxDelay bound the delay between attempts when the answer
	// names none (defaults 100 ms and 5 s): it doubles from MinDelay, and a
	// random part of it is taken so that clients do not retry in step.
	MinDelay, MaxDelay time.Duration
	// OnRetry, when not nil, hears of each attempt that will be made again.
	OnRetry func(attempt int, why string, delay time.Duration)
}

// Answer is the answer Submit, Accept or Await returns: for Submit the
// order's final answer, 201 with the order or 422 with the problem naming why
// it was rejected (a retry of the key gets the same bytes).
type Answer struct {
	// Status is 201 or 422 (Submit), 202 or 409 too (Accept), 200 (Await).
	Status int
	// OrderID is the order the key holds.
	OrderID string
	// Body is the answer's body as sent.
	Body []byte
	// Replayed is true when the answer was stored for an earlier attempt.
	Replayed bool
	// Attempts counts the requests this submission sent.
	Attempts int
}

// Created reports whether the order was made: a 201, or a read (200) of a
// created order.
func (a Answer) Created() bool {
	switch a.Status {
	case http.StatusCreated:
		return true
	case http.StatusOK:
		var o struct {
			Status string `json:"status"`
		}
		return json.Unmarshal(a.Body, &o) == nil && o.Status == "created"
	}
	return false
}

func (a Answer) String() string {
	return fmt.Sprintf("%d %s (replayed: %t, attempts: %d) %s", a.Status, a.OrderID, a.Replayed, a.Attempts, a.Body)
}

// Problem is a refusal that no retry changes: the request is wrong
// (invalid_request, idempotency_key_reused, unauthorized, ...), and nothing
// was stored for it. For idempotency_key_reused, OrderID names the order
// that the key holds.
type Problem struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Detail  string `json:"detail"`
	OrderID string `json:"order_id"`
	Errors  []struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"errors"`
}

func (p *Problem) Error() string {
	s := fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail)
	for _, e := range p.Errors {
		if e.Field == "" { // the body as a whole
			s += "; " + e.Reason
			continue
		}
		s += fmt.Sprintf("; %s %s", e.Field, e.Reason)
	}
	return s
}

// ErrOutcomeUnknown is returned when ctx ended before an answer was final:
// the order may or may not have been accepted. Submit it again with the same
// key to learn which (never with a new key: that could make a second order).
var ErrOutcomeUnknown = errors.New("the order's outcome is unknown: submit it again with the same key")

// Submit sends order under key until its answer is final, and returns it:
// 201 with the order, or 422 order_rejected. Each attempt asks orderly to
// wait for the decision (Prefer: wait); a 202 or a 409 of an order not
// decided yet is asked again. Errors are *Problem, or ErrOutcomeUnknown
// (joined with the last attempt's error) when ctx ends first.
func (c *Client) Submit(ctx context.Context, key string, order []byte) (Answer, error) {
	return c.send(ctx, key, order, "wait="+c.waitSeconds(), func(status int, code string) bool {
		return status == http.StatusCreated || status == http.StatusUnprocessableEntity && code == "order_rejected"
	})
}

// Accept sends order under key until orderly has stored it, and returns at
// once (Prefer: respond-async): 202 for an order not decided yet (or 409,
// when an earlier attempt of the key stored it), or, when the key's order
// is decided already, its final answer. Answer.OrderID names the order for
// Await. Errors are those of Submit.
func (c *Client) Accept(ctx context.Context, key string, order []byte) (Answer, error) {
	return c.send(ctx, key, order, "respond-async", func(status int, code string) bool {
		switch status {
		case http.StatusCreated, http.StatusAccepted:
			return true
		case http.StatusConflict:
			return code == "idempotency_key_in_use"
		case http.StatusUnprocessableEntity:
			return code == "order_rejected"
		}
		return false
	})
}

// Await long-polls the order until it is decided (GET /v1/orders/{id}?wait=)
// and returns it: 200 with status created or rejected. A superseded order
// (303) is followed to the order that holds its key. Errors are *Problem
// (404: no such order), or ErrOutcomeUnknown joined with the last attempt's
// error and ctx's when ctx ends first.
func (c *Client) Await(ctx context.Context, orderID string) (Answer, error) {
	u := strings.TrimSuffix(c.URL, "/") + "/v1/orders/" + url.PathEscape(orderID) + "?wait=" + c.waitSeconds()
	return c.retry(ctx, func() (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	}, func(status int, _ string, body []byte) (bool, error) {
		if status != http.StatusOK {
			return false, nil
		}
		var o struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(body, &o); err != nil {
			return false, fmt.Errorf("reading the order: %w", err)
		}
		if o.Status == "pending" {
			return false, errors.New("200 pending")
		}
		return true, nil
	})
}

func (c *Client) wait() time.Duration {
	if c.Wait <= 0 {
		return 10 * time.Second
	}
	return c.Wait
}

// waitSeconds is wait in whole seconds, at least 1, as Prefer: wait and
// ?wait= take it.
func (c *Client) waitSeconds() string { return strconv.Itoa(max(1, int(c.wait()/time.Second))) }

// send posts order under key with the Prefer header until final says that
// an answer is the one to return.
func (c *Client) send(ctx context.Context, key string, order []byte, prefer string, final func(status int, code string) bool) (Answer, error) {
	return c.retry(ctx, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+"/v1/orders", bytes.NewReader(order))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Prefer", prefer)
		return req, nil
	}, func(status int, code string, _ []byte) (bool, error) {
		return final(status, code), nil
	})
}

// retry sends the request that newReq makes until an answer is done: done
// says so (or, with an error, why the answer is asked again). An answer that
// is not done is asked again if it may change (no answer, 408, 429, 5xx, or
// a 2xx or 409 that done turned down); any other is a *Problem.
func (c *Client) retry(ctx context.Context, newReq func() (*http.Request, error), done func(status int, code string, body []byte) (bool, error)) (Answer, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: c.wait() + 20*time.Second}
	}
	for n := 1; ; n++ {
		req, err := newReq()
		if err != nil {
			return Answer{Attempts: n}, err // a URL that makes no request
		}
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		o := attempt(hc, req, done)
		o.answer.Attempts = n
		if o.final {
			return o.answer, o.err
		}
		delay, named := o.retryAfter()
		if !named {
			delay = c.backoff(n)
		}
		if c.OnRetry != nil {
			c.OnRetry(n, o.err.Error(), delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return Answer{Attempts: n}, errors.Join(ErrOutcomeUnknown, o.err, ctx.Err())
		case <-t.C:
		}
	}
}

// outcome is what one attempt ended with.
type outcome struct {
	// final says that the answer is the one to return: answer, or err
	// (a *Problem). Otherwise err says why the attempt is made again.
	final  bool
	answer Answer
	err    error
	// header is the answer's Retry-After, if any.
	header string
}

// retryAfter reads the answer's Retry-After: whole seconds or an HTTP date,
// at most a minute.
func (o outcome) retryAfter() (time.Duration, bool) {
	if o.header == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(o.header); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, time.Minute), true
	}
	if t, err := http.ParseTime(o.header); err == nil {
		return min(max(time.Until(t), 0), time.Minute), true
	}
	return 0, false
}

// attempt sends req once.
func attempt(hc *http.Client, req *http.Request, done func(status int, code string, body []byte) (bool, error)) outcome {
	resp, err := hc.Do(req)
	if err != nil {
		// No answer: the order may have been stored or not. The same key
		// makes the retry safe either way.
		return outcome{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return outcome{err: fmt.Errorf("reading the answer: %w", err)}
	}
	a := Answer{Status: resp.StatusCode, Body: body, Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	if loc := resp.Header.Get("Location"); loc != "" {
		a.OrderID = path.Base(loc)
	} else if resp.Request != nil && resp.StatusCode == http.StatusOK {
		a.OrderID = path.Base(resp.Request.URL.Path) // a read, after any redirect
	}
	var p Problem
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		_ = json.Unmarshal(body, &p) // a body that is not a problem leaves p empty
	}
	p.Status = resp.StatusCode
	p.Detail = cmp.Or(p.Detail, http.StatusText(resp.StatusCode))
	s := resp.StatusCode
	ok, why := done(s, p.Code, body)
	switch {
	case ok:
		return outcome{final: true, answer: a}
	case s < 300 || s == http.StatusConflict || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		if why == nil {
			why = fmt.Errorf("%d %s", s, cmp.Or(p.Code, strings.ToLower(http.StatusText(s))))
		}
		return outcome{answer: a, header: resp.Header.Get("Retry-After"), err: why}
	default:
		return outcome{final: true, answer: a, err: &p}
	}
}

// backoff is the delay after the n-th attempt when the answer names none:
// a random part of MinDelay doubled n-1 times, at most MaxDelay, and at
// least half of it.
func (c *Client) backoff(n int) time.Duration {
	lo, hi := c.MinDelay, c.MaxDelay
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 5 * time.Second
	}
	hi = max(hi, lo)
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}
