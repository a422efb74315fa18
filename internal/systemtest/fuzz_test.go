package systemtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// rawRequest builds one HTTP/1.1 request from the fuzzer's parts. The parts
// may hold anything (CR, LF, NUL, non-ASCII): the server must cope with what
// arrives. Content-Length is set from the body unless the headers give one.
func rawRequest(method, target, headers string, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: orderly\r\n")
	if headers != "" {
		b.WriteString(strings.TrimRight(headers, "\r\n") + "\r\n")
	}
	if !strings.Contains(strings.ToLower(headers), "content-length") && !strings.Contains(strings.ToLower(headers), "transfer-encoding") {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(body)
	return b.Bytes()
}

// probeHTTP sends one raw request and checks the answer: no 5xx but a
// deliberate 503 (or the 501 RFC 9112 prescribes for a transfer coding the
// server does not implement), an answer within 10 s, and then an order still goes through.
func probeHTTP(url, method, target, headers string, body []byte) error {
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(rawRequest(method, target, headers, body)); err == nil {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("no answer within 10 s to %q %q with headers %q", method, target, headers)
		case err == nil:
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				var p struct {
					Code string `json:"code"`
				}
				_ = json.Unmarshal(b, &p)
				deliberate := resp.StatusCode == http.StatusServiceUnavailable && (p.Code == "service_unavailable" || p.Code == "outcome_unknown" || p.Code == "not_ready") ||
					// RFC 9112 6.1: a transfer coding the server does not implement
					// (Go's net/http: anything but one "chunked") is 501.
					resp.StatusCode == http.StatusNotImplemented && strings.Contains(strings.ToLower(headers), "transfer-encoding")
				if !deliberate {
					return fmt.Errorf("%q %q with headers %q and body %q: %d %s", method, target, headers, body, resp.StatusCode, b)
				}
			}
		}
		// Otherwise the server closed the connection on the garbage: fine.
	}
	// Whatever came before, the service still takes an order.
	r, err := orderlytest.TryDo(http.MethodPost, url+"/v1/orders", orderlytest.Order("c-after"),
		"Content-Type: application/json", fmt.Sprintf("Idempotency-Key: after-fuzz-%d", time.Now().UnixNano()), "Prefer: respond-async")
	if err != nil || r.Status != http.StatusAccepted && r.Status != http.StatusCreated {
		return fmt.Errorf("an order after %q %q: %d %s %v", method, target, r.Status, r.Body, err)
	}
	return nil
}

const fuzzOrder = `{"customer_id":"c-fuzz","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}],"total":4990}`

// httpSeeds are requests that broke orderly once or are close to a limit:
// the fuzzers' starting points.
var httpSeeds = []struct{ method, target, headers, body string }{
	{"POST", "/v1/orders", "Content-Type: application/json\r\nIdempotency-Key: fuzz-1", fuzzOrder},
	{"POST", "/v1/orders", "Content-Type: application/json\r\nIdempotency-Key: \"fuzz-2\";p=1\r\nPrefer: wait=3, respond-async", fuzzOrder},
	{"POST", "/v1/orders", "Content-Type: application/json; charset=utf-8\r\nIdempotency-Key: fuzz-3", `{"customer_id":"c","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}],"total":1,"total":2}`},
	{"POST", "/v1/orders", "Content-Type: application/json\r\nIdempotency-Key: fuzz-4\r\nContent-Encoding: gzip", "\x1f\x8b\x08"},
	{"POST", "/v1/orders", "Content-Type: application/json\r\nIdempotency-Key: fuzz-5\r\nTransfer-Encoding: chunked", "5\r\n{\"a\":\r\n0\r\n\r\n"},
	{"POST", "/v1/orders", "Content-Type: application/json\r\nIdempotency-Key: fuzz-6\r\nContent-Length: 99999999", "{}"},
	{"POST", "/v1/orders", "Idempotency-Key: \xff\xfe", "\x00\x01"},
	{"GET", "/v1/orders/ord_0000000000001TQGB1N98BMXH0?wait=99999999999999999999", "", ""},
	{"GET", "/v1/orders/%3E/events", "", ""},
	{"GET", "/v1/orders/ord_0000000000000N0NCE0000000A", "", ""},               // sequence 0: was a 500
	{"GET", "/v1/orders/ord_0000000000000AYgtf0Exck_pdTHqc6a4/events", "", ""}, // keyed, sequence 0
	{"GET", "/v1/orders/" + strings.Repeat("z", 5000) + "/events", "", ""},
	{"HEAD", "/readyz", "", ""},
	{"M000001", "/metrics", "", ""},
	{"GET", "/v1/orders/a%20b", "Authorization: Bearer x", ""},
	{"OPTIONS", "*", "", ""},
	{"GET", "http://evil.example/v1/orders/x", "", ""},
	{"POST", "/v1/orders/", "Content-Type: application/json", fuzzOrder},
	{"GET", "/../../etc/passwd", "", ""},
	{"OPTIONS", "*", "Transfer-Encoding: chunked", ""}, // net/http's own handler waited for the body for ever
}

// startFuzzTarget starts the orderly the fuzzers send to, with short waits
// and timeouts so that an input that waits out a limit costs seconds.
func startFuzzTarget(tb testing.TB) *orderlytest.Instance {
	cfg := orderlytest.Config(tb)
	cfg.API.Wait = 200 * time.Millisecond
	cfg.API.MaxWait = time.Second
	cfg.HTTP.HeaderTimeout = 2 * time.Second
	cfg.HTTP.BodyTimeout = 2 * time.Second
	return orderlytest.Start(tb, cfg)
}

// FuzzHTTP sends random methods, paths, headers and bodies to a running
// orderly on a real embedded NATS. No input may make it answer a 5xx other
// than a deliberate 503 (store unavailable, not ready), and afterwards it
// still takes an order. `go test` runs the seeds; CI runs the fuzzer for a
// bounded time (`go test -fuzz FuzzHTTP -fuzztime 30s ./internal/systemtest`).
func FuzzHTTP(f *testing.F) {
	for _, s := range httpSeeds {
		f.Add(s.method, s.target, s.headers, []byte(s.body))
	}
	// One orderly for every input (each fuzzing worker process starts its
	// own): a server per input would measure start-up, not the HTTP stack.
	inst := startFuzzTarget(f)
	f.Fuzz(func(t *testing.T, method, target, headers string, body []byte) {
		if len(method) > 64 || len(target) > 8192 || len(headers) > 16384 || len(body) > 70000 {
			t.Skip("larger than any limit the server has; covered by the limit tests")
		}
		if err := probeHTTP(inst.URL, method, target, headers, body); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHTTPRandomInputs is FuzzHTTP without the coverage-guided engine, so
// that `go test ./...` and CI run it without instrumenting every dependency
// (a cold instrumented build takes minutes): it mutates the seeds at random
// for ORDERLY_HTTP_FUZZ_TIME (default 5s) from 8 clients at once, and
// prints the seed of the run so that a failure can be replayed with
// ORDERLY_HTTP_FUZZ_SEED.
func TestHTTPRandomInputs(t *testing.T) {
	t.Parallel()
	budget := 5 * time.Second
	if v := os.Getenv("ORDERLY_HTTP_FUZZ_TIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ORDERLY_HTTP_FUZZ_TIME: %v", err)
		}
		budget = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ORDERLY_HTTP_FUZZ_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ORDERLY_HTTP_FUZZ_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (replay with ORDERLY_HTTP_FUZZ_SEED=%d)", seed, seed)
	inst := startFuzzTarget(t)

	deadline := time.Now().Add(budget)
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range uint64(8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, w))
			for time.Now().Before(deadline) && !t.Failed() {
				m, target, headers, body := mutateRequest(rng)
				if err := probeHTTP(inst.URL, m, target, headers, body); err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d random requests in %s", sent.Load(), budget)
}

// Pieces the mutator splices into requests.
var (
	fuzzMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "M000001", "get", "", "G\x00ET"}
	fuzzTargets = []string{"/v1/orders", "/v1/orders/", "/v1/orders/ord_0000000000001TQGB1N98BMXH0", "/v1/orders/ord_0000000000001TQGB1N98BMXH0/events",
		"/v1/orders/ord_0000000000001AYgtf0Exck_pdTHqc6a4", "/v1/orders/ord_0000000000000AYgtf0Exck_pdTHqc6a4/events",
		"/v1/orders/%3E", "/v1/orders/*", "/v1/orders/a.b", "/v1/orders/..%2F..", "/healthz", "/readyz", "/metrics", "/openapi.json",
		"*", "/", "//v1//orders", "/v1/orders?wait=1e309", "/v1/orders/x?wait=-5", "/v1/orders/x?wait=%00", "/v1/orders/x?wiat=1&wait=2", "/v1/orders?%zz;a=1", "/v1/orders/x/events?wait=1", "http://other/v1/orders"}
	fuzzHeaders = []string{"Content-Type: application/json", "Content-Type: text/plain", "Content-Type: application/json; charset=latin1",
		"Idempotency-Key: k", "Idempotency-Key: \"k\"", "Idempotency-Key: \"\"", "Idempotency-Key: " + strings.Repeat("k", 300),
		"Prefer: respond-async", "Prefer: wait=999999999999", "Prefer: wait=-1", "Authorization: Bearer x", "Authorization: Basic eA==",
		"Content-Encoding: br", "Transfer-Encoding: chunked", "Content-Length: -1", "Content-Length: 3", "Expect: 100-continue",
		"Connection: upgrade", "Upgrade: h2c", "X-Forwarded-For: 1.2.3.4", "Host: other"}
	fuzzBodies = []string{fuzzOrder, "", "{}", "[]", "null", `{"customer_id":1}`, `{"items":[{"quantity":1e400}]}`, "\xff\xfe", "{\"a\":\"\\ud800\"}",
		strings.Repeat("[", 10000), `{"customer_id":"c","currency":"EUR","items":[]}`}
)

// mutateRequest picks a seed or random pieces and damages them a little.
func mutateRequest(rng *rand.Rand) (method, target, headers string, body []byte) {
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	if rng.IntN(3) == 0 {
		s := httpSeeds[rng.IntN(len(httpSeeds))]
		method, target, headers, body = s.method, s.target, s.headers, []byte(s.body)
	} else {
		method, target, body = pick(fuzzMethods), pick(fuzzTargets), []byte(pick(fuzzBodies))
		var hs []string
		for range rng.IntN(5) {
			hs = append(hs, pick(fuzzHeaders))
		}
		headers = strings.Join(hs, "\r\n")
	}
	flip := func(b []byte) []byte {
		if len(b) == 0 {
			return []byte{byte(rng.IntN(256))}
		}
		b = append([]byte(nil), b...)
		switch i := rng.IntN(len(b)); rng.IntN(3) {
		case 0:
			b[i] = byte(rng.IntN(256))
		case 1:
			b = append(b[:i], b[i+1:]...)
		default:
			b = append(b[:i], append([]byte{byte(rng.IntN(256))}, b[i:]...)...)
		}
		return b
	}
	for range rng.IntN(4) {
		switch rng.IntN(4) {
		case 0:
			method = string(flip([]byte(method)))
		case 1:
			target = string(flip([]byte(target)))
		case 2:
			headers = string(flip([]byte(headers)))
		default:
			body = flip(body)
		}
	}
	return method, target, headers, body
}
