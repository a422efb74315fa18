package systemtest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// Hostile and buggy clients: what the security review reproduced, one test
// per finding.

// TestHostileOrderIDs: nothing a client puts where an order ID goes reaches
// NATS as a subject: a long ID, wildcards and IDs that are not subject tokens
// are 404 (never 503), and the service keeps working afterwards.
func TestHostileOrderIDs(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.API.Tokens = map[string]string{"token-a": "tenant-a", "token-b": "tenant-b"}
	inst := orderlytest.Start(t, cfg)
	created := inst.PostOrder(t, "hostile-1", orderlytest.Order("c-secret"), "Authorization: Bearer token-a")
	if created.Status != http.StatusCreated {
		t.Fatalf("setup: %d %s", created.Status, created.Body)
	}
	for _, id := range []string{strings.Repeat("z", 5000), "%3E", "*", "ord_*", "a%20b", "a%09b", "..", "ord_%3E", "%2A.%3E",
		// Well-formed but for sequence 0, which no stream stores (was a 500).
		"ord_0000000000000N0NCE0000000A", "ord_0000000000000AYgtf0Exck_pdTHqc6a4",
		// An order ID's length and form, with what a subject must not take in
		// its key token (keyed IDs) or nonce.
		"ord_0000000000001aaaaaaaaaaaaaaaaaa.*", "ord_0000000000001aaaaaaaaaaaaaaaaaa.%3E", "ord_0000000000001aaaaaaaaaaaaaaaaaaa*",
		"ord_0000000000001aaaaaaaaaaaaaaaaaa..", "ord_0000000000001aaaaaaaaa%20aaaaaaaaaa", "ord_0000000000001N0NCE000000.*",
		"ord_0000000000001N0NCE000000.%3E", "ord_0000000000001N0NCE0000000*"} {
		for _, suffix := range []string{"", "/events"} {
			r := orderlytest.Do(t, http.MethodGet, inst.URL+"/v1/orders/"+id+suffix, nil, "Authorization: Bearer token-b")
			if r.Status != http.StatusNotFound || bytes.Contains(r.Body, []byte("c-secret")) {
				t.Fatalf("GET /v1/orders/%.40s%s: %d %.200s", id, suffix, r.Status, r.Body)
			}
		}
	}
	if r := inst.PostOrder(t, "hostile-2", orderlytest.Order("c-2"), "Authorization: Bearer token-a"); r.Status != http.StatusCreated {
		t.Fatalf("after the hostile IDs: %d %s", r.Status, r.Body)
	}
}

// TestStrictJSONUnderTheFingerprint: what would decode to one request from
// different bodies is refused with the field.
func TestStrictJSONUnderTheFingerprint(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	for name, tc := range map[string]struct{ body, field string }{
		"a field twice":  {`{"customer_id":"c","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}],"total":1,"total":100}`, "total"},
		"leading zero":   {`{"customer_id":"c","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":0100}]}`, ""},
		"invalid UTF-8":  {"{\"customer_id\":\"c\xff\",\"currency\":\"EUR\",\"items\":[{\"sku\":\"x\",\"quantity\":1,\"unit_price\":1}]}", "customer_id"},
		"other UTF-8":    {"{\"customer_id\":\"c\xfe\",\"currency\":\"EUR\",\"items\":[{\"sku\":\"x\",\"quantity\":1,\"unit_price\":1}]}", "customer_id"},
		"lone surrogate": {`{"customer_id":"c\ud800","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}]}`, "customer_id"},
	} {
		r := inst.PostOrder(t, "strict-"+strings.ReplaceAll(name, " ", "-"), []byte(tc.body))
		p := r.Problem(t)
		errs, _ := p["errors"].([]any)
		if r.Status != http.StatusBadRequest || len(errs) != 1 || errs[0].(map[string]any)["field"] != tc.field {
			t.Fatalf("%s: %d %s, want 400 on field %q", name, r.Status, r.Body, tc.field)
		}
	}
}

// TestContentCodingAndTypes: a compressed body is 415, not a parse error; a
// coding header on a plain body is 415; two Content-Type fields are 400.
func TestContentCodingAndTypes(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(orderlytest.Order("c-1"))
	_ = w.Close()
	if r := inst.PostOrder(t, "coding-1", gz.Bytes(), "Content-Encoding: gzip"); r.Status != http.StatusUnsupportedMediaType {
		t.Fatalf("gzip body: %d %s", r.Status, r.Body)
	}
	if r := inst.PostOrder(t, "coding-2", orderlytest.Order("c-1"), "Content-Encoding: br"); r.Status != http.StatusUnsupportedMediaType {
		t.Fatalf("br header on a plain body: %d %s", r.Status, r.Body)
	}
	if r := inst.PostOrder(t, "coding-3", orderlytest.Order("c-1"), "Content-Encoding: identity"); r.Status != http.StatusCreated {
		t.Fatalf("identity: %d %s", r.Status, r.Body)
	}
	if r := inst.PostOrder(t, "coding-4", orderlytest.Order("c-1"), "Content-Type: text/plain"); r.Status != http.StatusBadRequest || r.Problem(t)["code"] != "invalid_request" {
		t.Fatalf("two Content-Type fields: %d %s", r.Status, r.Body)
	}
}

// TestHTTPDetails: HEAD where GET is served, a trailing slash answers
// problem+json, a body of many bad items gets a bounded error list, and
// huge waits are capped like durations.
func TestHTTPDetails(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	created := inst.PostOrder(t, "details-1", orderlytest.Order("c-1"))
	loc := created.Header.Get("Location")
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json", loc, loc + "/events"} {
		if r := orderlytest.Do(t, http.MethodHead, inst.URL+path, nil); r.Status != http.StatusOK || len(r.Body) != 0 {
			t.Fatalf("HEAD %s: %d", path, r.Status)
		}
	}
	for _, path := range []string{loc + "/", "/v1/orders/", "/healthz/"} {
		r := orderlytest.Do(t, http.MethodGet, inst.URL+path, nil)
		if r.Status != http.StatusNotFound || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("GET %s: %d %s %s", path, r.Status, r.Header.Get("Content-Type"), r.Body)
		}
	}
	var items []string
	for i := 0; i < 300; i++ {
		items = append(items, `{"sku":"","quantity":0,"unit_price":-1,"x":1}`)
	}
	body := []byte(`{"customer_id":"","currency":"eur","items":[` + strings.Join(items, ",") + `]}`)
	r := inst.PostOrder(t, "details-2", body)
	if r.Status != http.StatusBadRequest || len(r.Body) > 4096 || len(r.Problem(t)["errors"].([]any)) != 20 {
		t.Fatalf("%d-byte body of bad items: %d, %d-byte answer", len(body), r.Status, len(r.Body))
	}
	if !strings.Contains(r.Problem(t)["detail"].(string), "the first 20 are listed") {
		t.Fatalf("detail: %s", r.Problem(t)["detail"])
	}
	for _, wait := range []string{"99999999999999999999", "9999999999h"} {
		begin := time.Now()
		r := orderlytest.Do(t, http.MethodGet, inst.URL+loc+"?wait="+url.QueryEscape(wait), nil)
		if r.Status != http.StatusOK || time.Since(begin) > 5*time.Second {
			t.Fatalf("?wait=%s: %d %s", wait, r.Status, r.Body)
		}
	}
	begin := time.Now()
	if r := inst.PostOrder(t, "details-1", orderlytest.Order("c-1"), "Prefer: wait=99999999999999999999"); r.Status != http.StatusCreated ||
		r.Header.Get("Preference-Applied") != "wait=30" || time.Since(begin) > 5*time.Second {
		t.Fatalf("Prefer: wait=huge: %d %v", r.Status, r.Header)
	}
}

// TestKeyParameters: RFC 9651 parameters on the key are ignored in the
// quoted and the bare form alike: both are the key abc.
func TestKeyParameters(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	first := inst.PostOrder(t, `"params-abc";p=1`, orderlytest.Order("c-1"))
	if first.Status != http.StatusCreated {
		t.Fatalf("quoted with a parameter: %d %s", first.Status, first.Body)
	}
	for _, key := range []string{`params-abc;p=1`, `params-abc`, `"params-abc"`} {
		r := inst.PostOrder(t, key, orderlytest.Order("c-1"))
		if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("%s: %d %v, want a replay of the first", key, r.Status, r.Header)
		}
	}
}

// TestMetricsCardinalityIsBounded: invented methods and paths do not grow
// /metrics.
func TestMetricsCardinalityIsBounded(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	size := func() int { return len(orderlytest.Do(t, http.MethodGet, inst.URL+"/metrics", nil).Body) }
	raw := func(req string) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(inst.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = conn.Write([]byte(req))
		_, _ = http.ReadResponse(bufio.NewReader(conn), nil)
	}
	raw("M000000 / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	raw("GET /p000000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	size() // the series of GET /metrics itself
	before := size()
	for i := 1; i < 300; i++ {
		raw(fmt.Sprintf("M%06d / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", i))
		raw(fmt.Sprintf("GET /p%06d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", i))
	}
	if after := size(); after > before+512 {
		t.Fatalf("/metrics grew from %d to %d bytes with 600 invented methods and paths:\n%s", before, after,
			orderlytest.Do(t, http.MethodGet, inst.URL+"/metrics", nil).Body)
	}
}

// slowRequest sends head on a new connection, then trickles one byte of
// body every interval until the server answers; it returns the status line
// and when it came.
func slowRequest(addr, head string, interval, limit time.Duration) (status string, after time.Duration, err error) {
	begin := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return "", 0, err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		return "", 0, err
	}
	stop := make(chan struct{})
	defer close(stop)
	if interval > 0 {
		go func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
	}
	_ = conn.SetReadDeadline(begin.Add(limit))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), time.Since(begin), err
}

// TestSlowAndGreedyClients: 200 connections that trickle a body are answered
// 408 once the body timeout has passed, and closed; a request without a token
// is refused before its body is read; headers over the limit are refused; a
// connection that never finishes its headers is closed, and so is one whose
// body nobody reads; long polls outlast the timeouts; and the service still
// takes orders.
func TestSlowAndGreedyClients(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Projector: true} // no processor: orders stay pending for the long poll
	cfg.API.Tokens = map[string]string{"token-a": "tenant-a"}
	cfg.HTTP.BodyTimeout = 2 * time.Second
	cfg.HTTP.HeaderTimeout = 2 * time.Second
	inst := orderlytest.Start(t, cfg)
	addr := strings.TrimPrefix(inst.URL, "http://")
	head := func(key, auth string) string {
		return "POST /v1/orders HTTP/1.1\r\nHost: orderly\r\nContent-Type: application/json\r\nIdempotency-Key: " + key +
			"\r\n" + auth + "Content-Length: 65536\r\n\r\n"
	}

	const n = 200
	type result struct {
		status string
		after  time.Duration
		err    error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			s, after, err := slowRequest(addr, head(fmt.Sprintf("slow-%d", i), "Authorization: Bearer token-a\r\n"), 500*time.Millisecond, 15*time.Second)
			results <- result{s, after, err}
		}()
	}
	// Meanwhile: no token, no body: 401 at once.
	if s, after, err := slowRequest(addr, head("no-token", ""), 0, 5*time.Second); err != nil || !strings.Contains(s, " 401 ") || after > time.Second {
		t.Errorf("without a token: %q after %s (%v), want 401 before the body", s, after, err)
	}
	// Headers that never end: closed after the header timeout.
	if s, after, err := slowRequest(addr, "GET /v1/orders/ord_1 HTTP/1.1\r\nHost: orderly\r\n", 0, 10*time.Second); err == nil || after > 5*time.Second {
		t.Errorf("unfinished headers: %q after %s (%v), want the connection closed within the header timeout", s, after, err)
	}
	// A body no handler of ours reads (net/http answers OPTIONS * itself):
	// closed too.
	if s, after, err := slowRequest(addr, "OPTIONS * HTTP/1.1\r\nHost: orderly\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 10*time.Second); after > 6*time.Second {
		t.Errorf("OPTIONS * with a body that never comes: %q after %s (%v), want it cut off", s, after, err)
	}
	// Headers over the limit.
	big := "GET /v1/orders/ord_1 HTTP/1.1\r\nHost: orderly\r\nX-Big: " + strings.Repeat("b", 40<<10) + "\r\n\r\n"
	if s, _, err := slowRequest(addr, big, 0, 5*time.Second); err != nil || !strings.Contains(s, " 431 ") {
		t.Errorf("40 KiB of headers: %q (%v), want 431", s, err)
	}
	for range n {
		r := <-results
		if r.err != nil || !strings.Contains(r.status, " 408 ") || r.after > 6*time.Second {
			t.Fatalf("slow upload: %q after %s (%v), want 408 after the 2 s body timeout", r.status, r.after, r.err)
		}
	}

	auth := "Authorization: Bearer token-a"
	pending := inst.PostOrder(t, "after-the-slow-ones", orderlytest.Order("c-1"), auth, "Prefer: respond-async")
	if pending.Status != http.StatusAccepted {
		t.Fatalf("after the slow uploads: %d %s", pending.Status, pending.Body)
	}
	begin := time.Now()
	poll := orderlytest.Do(t, http.MethodGet, inst.URL+pending.Header.Get("Location")+"?wait=6s", nil, auth)
	if poll.Status != http.StatusOK || time.Since(begin) < 5500*time.Millisecond {
		t.Fatalf("a 6 s long poll with 2 s header and body timeouts: %d after %s", poll.Status, time.Since(begin))
	}
}
