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
//   - a retry after a network error, a timeout, 408, 429, 500, 502, 503 or
//     504, after the answer's Retry-After or a growing delay with jitter;
//   - a retry of a 202 (stored, not decided within the wait) or a 409 (an
//     earlier attempt of the key is still pending) too: with Prefer: wait=N
//     the retry waits for the original's decision and replays its answer;
//   - 201 and 422 order_rejected are the order's final answer, the same
//     bytes for every retry; any other 4xx is final as well (the request
//     itself is wrong, and nothing was stored).
//
// Run it against orderly serve with an order on standard input:
//
//	echo '{"customer_id":"c-42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}]}' |
//	  go run ./examples/client --url http://127.0.0.1:8080
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
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "base URL of the orderly API")
	key := flag.String("key", "", "idempotency key of the order (default: a new random one; give the printed one to submit the same order again)")
	tokenFile := flag.String("token-file", "", "file holding the bearer token, when the API has tokens")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to keep trying before the outcome is left unknown")
	flag.Parse()

	order, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		log.Fatal(err)
	}
	c := &Client{URL: *url, OnRetry: func(n int, why string, delay time.Duration) {
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
	a, err := c.Submit(ctx, *key, order)
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

// Answer is an order's final answer: 201 with the order, or 422 with the
// problem naming why it was rejected. A retry of the key gets the same.
type Answer struct {
	// Status is 201 or 422.
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

// Created reports whether the order was made.
func (a Answer) Created() bool { return a.Status == http.StatusCreated }

func (a Answer) String() string {
	return fmt.Sprintf("%d %s (replayed: %t, attempts: %d) %s", a.Status, a.OrderID, a.Replayed, a.Attempts, a.Body)
}

// Problem is a refusal that no retry changes: the request is wrong
// (invalid_request, idempotency_key_reused, unauthorized, ...). Nothing was
// stored for it, except for idempotency_key_reused, whose OrderID names the
// order the key holds.
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
		s += fmt.Sprintf("; %s %s", e.Field, e.Reason)
	}
	return s
}

// ErrOutcomeUnknown is returned when ctx ended before an answer was final:
// the order may or may not have been accepted. Submit it again with the same
// key to learn which (never with a new key: that could make a second order).
var ErrOutcomeUnknown = errors.New("the order's outcome is unknown: submit it again with the same key")

// Submit sends order under key until its answer is final, and returns it.
// Errors are *Problem, or ErrOutcomeUnknown (joined with the last attempt's
// error) when ctx ends first.
func (c *Client) Submit(ctx context.Context, key string, order []byte) (Answer, error) {
	wait := c.Wait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: wait + 20*time.Second}
	}
	for n := 1; ; n++ {
		o := c.attempt(ctx, hc, key, order, wait)
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
	// final says that the answer is the order's last word: answer, or err
	// (a *Problem). Otherwise err says why the attempt is made again.
	final  bool
	answer Answer
	err    error
	// retryAfter is the answer's Retry-After header, if any.
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

// attempt sends the order once.
func (c *Client) attempt(ctx context.Context, hc *http.Client, key string, order []byte, wait time.Duration) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+"/v1/orders", bytes.NewReader(order))
	if err != nil {
		return outcome{final: true, err: err} // a URL that makes no request
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Prefer", "wait="+strconv.Itoa(max(1, int(wait/time.Second))))
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
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
	}
	var p Problem
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		_ = json.Unmarshal(body, &p) // a body that is not a problem leaves p empty
	}
	p.Status = resp.StatusCode
	p.Detail = cmp.Or(p.Detail, http.StatusText(resp.StatusCode))
	switch s := resp.StatusCode; {
	case s == http.StatusCreated, s == http.StatusUnprocessableEntity && p.Code == "order_rejected":
		return outcome{final: true, answer: a}
	case s == http.StatusAccepted, s == http.StatusConflict, s == http.StatusRequestTimeout,
		s == http.StatusTooManyRequests, s >= 500:
		return outcome{answer: a, header: resp.Header.Get("Retry-After"),
			err: fmt.Errorf("%d %s", s, cmp.Or(p.Code, strings.ToLower(http.StatusText(s))))}
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
