package systemtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// The tests in this file check every row of the response table of the HTTP
// contract (docs/http-contract.md) against a running orderly.

func commandCount(t *testing.T, inst *orderlytest.Instance) uint64 {
	t.Helper()
	return orderlytest.Stored(t, inst.JetStream(t), events.CommandStream)
}

func TestCreatedWithinWaitAndReplay(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))

	first := inst.PostOrder(t, `"key-1"`, orderlytest.Order("c-42"))
	if first.Status != http.StatusCreated {
		t.Fatalf("status = %d, want 201; body %s", first.Status, first.Body)
	}
	loc := first.Header.Get("Location")
	order := first.JSON(t)
	if order["status"] != "created" || order["total"] != float64(4990) || loc != "/v1/orders/"+order["id"].(string) {
		t.Fatalf("unexpected order %s with Location %q", first.Body, loc)
	}
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the first response must not be marked as replayed")
	}

	// The same request with the bare key, other key order and white space is the
	// same request: a replay of the stored response, byte for byte.
	same := []byte(`{ "total": 4990, "items": [ {"unit_price": 2495, "quantity": 2, "sku": "SKU-1"} ],
		"currency": "EUR", "customer_id": "c-42" }`)
	for i := 0; i < 3; i++ {
		r := inst.PostOrder(t, "key-1", same)
		if r.Status != http.StatusCreated || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("replay %d: status %d body %s, want 201 and %s", i, r.Status, r.Body, first.Body)
		}
		if r.Header.Get("Location") != loc || r.Header.Get("Idempotent-Replayed") != "true" ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("replay %d headers: %v", i, r.Header)
		}
	}

	got := orderlytest.Do(t, http.MethodGet, inst.URL+loc, nil)
	if got.Status != http.StatusOK || !bytes.Equal(got.Body, first.Body) {
		t.Fatalf("GET %s = %d %s, want 200 and the created order", loc, got.Status, got.Body)
	}
	if n := commandCount(t, inst); n != 1 {
		t.Fatalf("%d commands stored, want 1: replays must not publish", n)
	}
}

func TestAcceptedWhenNotDecidedWithinWait(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Projector: true} // no processor: nothing gets decided
	cfg.API.Wait = 500 * time.Millisecond
	inst := orderlytest.Start(t, cfg)

	start := time.Now()
	r := inst.PostOrder(t, "slow-1", orderlytest.Order("c-1"))
	if r.Status != http.StatusAccepted {
		t.Fatalf("status = %d, want 202; body %s", r.Status, r.Body)
	}
	if el := time.Since(start); el < cfg.API.Wait {
		t.Fatalf("answered after %s, before the wait of %s", el, cfg.API.Wait)
	}
	body := r.JSON(t)
	id, _ := body["id"].(string)
	if !events.ValidOrderID(id) || body["status"] != "pending" || len(body) != 2 {
		t.Fatalf("202 body = %s", r.Body)
	}
	if r.Header.Get("Location") != "/v1/orders/"+id || r.Header.Get("Retry-After") == "" {
		t.Fatalf("202 headers: %v", r.Header)
	}

	// The accepted order is readable, pending.
	g := orderlytest.Do(t, http.MethodGet, inst.URL+"/v1/orders/"+id, nil)
	if g.Status != http.StatusOK || g.JSON(t)["status"] != "pending" || g.JSON(t)["customer_id"] != "c-1" {
		t.Fatalf("GET pending order = %d %s", g.Status, g.Body)
	}

	// respond-async answers at once, and says so.
	start = time.Now()
	a := inst.PostOrder(t, "slow-2", orderlytest.Order("c-1"), "Prefer: respond-async")
	if a.Status != http.StatusAccepted || a.Header.Get("Preference-Applied") != "respond-async" {
		t.Fatalf("respond-async: %d %v %s", a.Status, a.Header, a.Body)
	}
	if el := time.Since(start); el >= cfg.API.Wait {
		t.Fatalf("respond-async took %s, want less than the wait %s", el, cfg.API.Wait)
	}
}

func TestRetryWhilePending(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Projector: true}
	cfg.API.Wait = 0
	inst := orderlytest.Start(t, cfg)

	first := inst.PostOrder(t, "pending-1", orderlytest.Order("c-1"))
	if first.Status != http.StatusAccepted {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	loc := first.Header.Get("Location")

	retry := inst.PostOrder(t, "pending-1", orderlytest.Order("c-1"))
	if retry.Status != http.StatusConflict {
		t.Fatalf("retry while pending: %d %s, want 409", retry.Status, retry.Body)
	}
	p := retry.Problem(t)
	if p["code"] != "idempotency_key_in_use" || retry.Header.Get("Retry-After") == "" || retry.Header.Get("Location") != loc {
		t.Fatalf("409: %v %s", retry.Header, retry.Body)
	}

	// Another request with the same key while pending: 422, nothing published.
	before := commandCount(t, inst)
	other := inst.PostOrder(t, "pending-1", orderlytest.Order("c-other"))
	if other.Status != http.StatusUnprocessableEntity || other.Problem(t)["code"] != "idempotency_key_reused" {
		t.Fatalf("different request while pending: %d %s", other.Status, other.Body)
	}
	if after := commandCount(t, inst); after != before {
		t.Fatalf("commands went from %d to %d: a reused key must publish nothing", before, after)
	}

	// With Prefer: wait=N a retry waits for the original and replays it. A
	// processor joins the same NATS while the retry waits.
	type result struct {
		r   orderlytest.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := orderlytest.TryDo(http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-1"),
			"Content-Type: application/json", "Idempotency-Key: pending-1", "Prefer: wait=20")
		done <- result{r, err}
	}()
	time.Sleep(300 * time.Millisecond) // let the retry start waiting before the processor exists
	pcfg := orderlytest.Config(t)
	pcfg.Roles = server.Roles{Processor: true}
	orderlytest.Attach(&pcfg, inst.NATSURL(), inst.Creds, natsauth.Processor)
	orderlytest.Start(t, pcfg)

	select {
	case res := <-done:
		if res.err != nil {
			t.Fatal(res.err)
		}
		r := res.r
		if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" || r.Header.Get("Location") != loc {
			t.Fatalf("waiting retry: %d %v %s", r.Status, r.Header, r.Body)
		}
		if r.Header.Get("Preference-Applied") != "wait=20" {
			t.Fatalf("Preference-Applied = %q", r.Header.Get("Preference-Applied"))
		}
		again := inst.PostOrder(t, "pending-1", orderlytest.Order("c-1"))
		if !bytes.Equal(again.Body, r.Body) || again.Status != http.StatusCreated {
			t.Fatalf("replay after the wait differs: %s vs %s", again.Body, r.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting retry did not answer")
	}
}

func TestKeyReusedAfterCompletion(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	first := inst.PostOrder(t, "reuse-1", orderlytest.Order("c-1"))
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	before := commandCount(t, inst)
	r := inst.PostOrder(t, "reuse-1", orderlytest.Order("c-2"))
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422; body %s", r.Status, r.Body)
	}
	p := r.Problem(t)
	if p["code"] != "idempotency_key_reused" || p["order_id"] != first.JSON(t)["id"] {
		t.Fatalf("problem = %s", r.Body)
	}
	if after := commandCount(t, inst); after != before {
		t.Fatalf("commands went from %d to %d: nothing may be published", before, after)
	}
}

func TestInvalidBodyListsEveryFieldAndIsNotStored(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	bad := []byte(`{"customer_id":"","currency":"euro","items":[{"sku":"A","quantity":0,"unit_price":-1},{"quantity":1.5,"unit_price":"3"}],"extra":true}`)
	r := inst.PostOrder(t, "fix-me", bad)
	if r.Status != http.StatusBadRequest {
		t.Fatalf("status %d; body %s", r.Status, r.Body)
	}
	p := r.Problem(t)
	if p["code"] != "invalid_request" {
		t.Fatalf("code = %v", p["code"])
	}
	fields := map[string]bool{}
	for _, e := range p["errors"].([]any) {
		fields[e.(map[string]any)["field"].(string)] = true
	}
	for _, f := range []string{"extra", "customer_id", "currency", "items[0].quantity", "items[0].unit_price",
		"items[1].sku", "items[1].quantity", "items[1].unit_price"} {
		if !fields[f] {
			t.Errorf("no error for field %q in %s", f, r.Body)
		}
	}
	malformed := inst.PostOrder(t, "fix-me", []byte(`{"customer_id": "c-1",`))
	if malformed.Status != http.StatusBadRequest || malformed.Problem(t)["code"] != "invalid_request" {
		t.Fatalf("malformed JSON: %d %s", malformed.Status, malformed.Body)
	}
	// Not stored: the corrected request with the same key goes through.
	ok := inst.PostOrder(t, "fix-me", orderlytest.Order("c-1"))
	if ok.Status != http.StatusCreated {
		t.Fatalf("corrected request: %d %s", ok.Status, ok.Body)
	}
}

func TestRejectedIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	body := []byte(`{"customer_id":"c-1","currency":"EUR","items":[{"sku":"A","quantity":2,"unit_price":100}],"total":201}`)
	first := inst.PostOrder(t, "rej-1", body)
	if first.Status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d; body %s", first.Status, first.Body)
	}
	p := first.Problem(t)
	if p["code"] != "order_rejected" || p["reason"] != events.ReasonTotalMismatch {
		t.Fatalf("problem = %s", first.Body)
	}
	replay := inst.PostOrder(t, "rej-1", body)
	if replay.Status != http.StatusUnprocessableEntity || !bytes.Equal(replay.Body, first.Body) ||
		replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s", replay.Status, replay.Header, replay.Body)
	}
	g := orderlytest.Do(t, http.MethodGet, inst.URL+first.Header.Get("Location"), nil)
	if g.Status != http.StatusOK || g.JSON(t)["status"] != "rejected" {
		t.Fatalf("GET rejected order: %d %s", g.Status, g.Body)
	}
}

func TestTooLargeAndWrongMediaTypeAreNotStored(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.API.BodyLimit = 2048
	inst := orderlytest.Start(t, cfg)

	big := []byte(`{"customer_id":"` + strings.Repeat("x", 3000) + `","currency":"EUR","items":[]}`)
	r := inst.PostOrder(t, "size-1", big)
	if r.Status != http.StatusRequestEntityTooLarge || r.Problem(t)["code"] != "request_too_large" {
		t.Fatalf("too large: %d %s", r.Status, r.Body)
	}
	// Without a Content-Length (chunked) the limit holds as well.
	req, _ := http.NewRequest(http.MethodPost, inst.URL+"/v1/orders", io.MultiReader(bytes.NewReader(big)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "size-1")
	resp, err := orderlytest.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.ContentLength != 0 || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked too large: content length %d, status %d", req.ContentLength, resp.StatusCode)
	}

	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1"} {
		r := orderlytest.Do(t, http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-1"),
			"Content-Type: "+ct, "Idempotency-Key: size-1")
		if r.Status != http.StatusUnsupportedMediaType || r.Problem(t)["code"] != "unsupported_media_type" {
			t.Fatalf("Content-Type %q: %d %s", ct, r.Status, r.Body)
		}
	}
	noCT := orderlytest.Do(t, http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-1"), "Idempotency-Key: size-1")
	if noCT.Status != http.StatusUnsupportedMediaType {
		t.Fatalf("no Content-Type: %d", noCT.Status)
	}
	ok := orderlytest.Do(t, http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-1"),
		"Content-Type: application/json; charset=utf-8", "Idempotency-Key: size-1")
	if ok.Status != http.StatusCreated {
		t.Fatalf("after 413/415 the key must be free: %d %s", ok.Status, ok.Body)
	}
}

func TestIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	cases := []struct {
		name   string
		header []string
		code   string
	}{
		{"missing", nil, "idempotency_key_missing"},
		{"empty", []string{"Idempotency-Key: "}, "idempotency_key_missing"},
		{"empty quoted", []string{`Idempotency-Key: ""`}, "idempotency_key_missing"},
		{"too long", []string{"Idempotency-Key: " + strings.Repeat("k", 256)}, "idempotency_key_invalid"},
		{"space inside quotes", []string{`Idempotency-Key: "a b"`}, "idempotency_key_invalid"},
		{"non-ASCII", []string{"Idempotency-Key: schlüssel"}, "idempotency_key_invalid"},
		{"unterminated quote", []string{`Idempotency-Key: "abc`}, "idempotency_key_invalid"},
		{"two fields", []string{"Idempotency-Key: a", "Idempotency-Key: b"}, "idempotency_key_invalid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := append([]string{"Content-Type: application/json"}, tc.header...)
			r := orderlytest.Do(t, http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-1"), h...)
			if r.Status != http.StatusBadRequest || r.Problem(t)["code"] != tc.code {
				t.Fatalf("%d %s, want 400 %s", r.Status, r.Body, tc.code)
			}
		})
	}
	// 255 characters is the limit, and it is accepted.
	if r := inst.PostOrder(t, strings.Repeat("k", 255), orderlytest.Order("c-1")); r.Status != http.StatusCreated {
		t.Fatalf("255-character key: %d %s", r.Status, r.Body)
	}
}

func TestTokensScopeKeysByTenant(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.API.Tokens = map[string]string{"tok-a": "tenant-a", "tok-b": "tenant-b"}
	inst := orderlytest.Start(t, cfg)

	for _, h := range [][]string{nil, {"Authorization: Bearer nope"}, {"Authorization: Basic dG9rLWE6"}} {
		r := inst.PostOrder(t, "shared", orderlytest.Order("c-1"), h...)
		if r.Status != http.StatusUnauthorized || r.Problem(t)["code"] != "unauthorized" || r.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%v: %d %s", h, r.Status, r.Body)
		}
	}
	a := inst.PostOrder(t, "shared", orderlytest.Order("c-1"), "Authorization: Bearer tok-a")
	b := inst.PostOrder(t, "shared", orderlytest.Order("c-1"), "Authorization: Bearer tok-b")
	if a.Status != http.StatusCreated || b.Status != http.StatusCreated || b.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("one key in two tenants must make two orders: %d %s / %d %s", a.Status, a.Body, b.Status, b.Body)
	}
	if a.JSON(t)["id"] == b.JSON(t)["id"] {
		t.Fatal("two tenants got the same order")
	}
	if r := orderlytest.Do(t, http.MethodGet, inst.URL+a.Header.Get("Location"), nil, "Authorization: Bearer tok-b"); r.Status != http.StatusNotFound {
		t.Fatalf("another tenant's order: %d, want 404", r.Status)
	}
	if r := orderlytest.Do(t, http.MethodGet, inst.URL+a.Header.Get("Location"), nil, "Authorization: Bearer tok-a"); r.Status != http.StatusOK {
		t.Fatalf("own order: %d, want 200", r.Status)
	}
	if r := orderlytest.Do(t, http.MethodGet, inst.URL+a.Header.Get("Location"), nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("GET without token: %d, want 401", r.Status)
	}
}

func TestReadsAndOperationalEndpoints(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	created := inst.PostOrder(t, "read-1", orderlytest.Order("c-1"))
	id := created.JSON(t)["id"].(string)

	evs := orderlytest.Do(t, http.MethodGet, inst.URL+"/v1/orders/"+id+"/events", nil)
	if evs.Status != http.StatusOK || !bytes.Contains(evs.Body, []byte(`"type":"orderly.order.created.v1"`)) ||
		!bytes.HasPrefix(evs.Body, []byte(`[{"specversion":"1.0","id":"`+id+`.created"`)) {
		t.Fatalf("events: %d %s", evs.Status, evs.Body)
	}
	seq, ok := events.OrderSeq(id)
	if !ok {
		t.Fatalf("created order ID %q does not parse", id)
	}
	token := strings.Repeat("A", events.KeyTokenLen)
	for _, path := range []string{
		"/v1/orders/" + events.OrderID(seq+1000, "N0NCE0000000A"), // a well-formed ID never accepted
		"/v1/orders/" + events.OrderID(seq, "N0NCE0000000A"),      // the right sequence, a wrong nonce
		"/v1/orders/" + events.KeyedOrderID(seq, token),           // the right sequence, a wrong key
		"/v1/orders/" + events.KeyedOrderID(seq+1000, token),
		// Sequence 0: no stream stores it (a read of it was a 500).
		"/v1/orders/ord_0000000000000N0NCE0000000A", "/v1/orders/ord_0000000000000N0NCE0000000A/events",
		"/v1/orders/ord_0000000000000" + token, "/v1/orders/ord_0000000000000" + token + "/events",
		"/v1/orders/not-an-id", "/v1/orders/not-an-id/events",
	} {
		r := orderlytest.Do(t, http.MethodGet, inst.URL+path, nil)
		if r.Status != http.StatusNotFound || r.Problem(t)["code"] != "not_found" {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
	}
	for path, want := range map[string]string{
		"/healthz":      `"ok"`,
		"/readyz":       `"ready"`,
		"/metrics":      "orderly_http_requests_total",
		"/openapi.json": `"openapi": "3.1.0"`,
	} {
		r := orderlytest.Do(t, http.MethodGet, inst.URL+path, nil)
		if r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(want)) {
			t.Fatalf("GET %s: %d, body lacks %q", path, r.Status, want)
		}
	}
	if r := orderlytest.Do(t, http.MethodDelete, inst.URL+"/v1/orders", nil); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE /v1/orders: %d", r.Status)
	}
}

// TestLongPolling: GET ?wait= returns as soon as the order is decided, or the
// current state at the deadline, and the waiters share the process's one watch
// (no NATS consumer per waiting request).
func TestLongPolling(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Projector: true}
	cfg.API.Wait = 0
	inst := orderlytest.Start(t, cfg)
	js := inst.JetStream(t)
	accepted := inst.PostOrder(t, "poll-1", orderlytest.Order("c-1"))
	loc := accepted.Header.Get("Location")

	// The deadline: the current state, after the wait.
	start := time.Now()
	r := orderlytest.Do(t, http.MethodGet, inst.URL+loc+"?wait=300ms", nil)
	if r.Status != http.StatusOK || r.JSON(t)["status"] != "pending" || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("long poll at the deadline: %d %s after %s", r.Status, r.Body, time.Since(start))
	}
	if bad := orderlytest.Do(t, http.MethodGet, inst.URL+loc+"?wait=soon", nil); bad.Status != http.StatusBadRequest {
		t.Fatalf("?wait=soon: %d", bad.Status)
	}

	consumers := func() int {
		n := 0
		for _, name := range []string{events.EventStream, "KV_" + events.ResultsBucket} {
			info, err := js.Stream(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			n += info.CachedInfo().State.Consumers
		}
		return n
	}
	before := consumers()
	const waiters = 300
	results := make(chan orderlytest.Response, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			r, err := orderlytest.TryDo(http.MethodGet, inst.URL+loc+"?wait=20s", nil)
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	orderlytest.Eventually(t, 10*time.Second, "every long poll waiting", func() bool {
		m := orderlytest.Do(t, http.MethodGet, inst.URL+"/metrics", nil)
		return bytes.Contains(m.Body, []byte("orderly_waiters "+strconv.Itoa(waiters)+"\n"))
	})
	if during := consumers(); during != before {
		t.Fatalf("%d consumers on ORDER_EVENTS and ORDER_RESULTS while %d requests wait, %d before: waiters must share one watch", during, waiters, before)
	}

	// A processor decides the order: every waiter returns at once with it.
	pcfg := orderlytest.Config(t)
	pcfg.Roles = server.Roles{Processor: true}
	orderlytest.Attach(&pcfg, inst.NATSURL(), inst.Creds, natsauth.Processor)
	decidedAt := time.Now()
	orderlytest.Start(t, pcfg)
	for i := 0; i < waiters; i++ {
		select {
		case r := <-results:
			if r.Status != http.StatusOK || r.JSON(t)["status"] != "created" {
				t.Fatalf("waiter %d: %d %s", i, r.Status, r.Body)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("waiter %d did not return after the decision", i)
		}
	}
	t.Logf("%d waiters answered %s after the processor started", waiters, time.Since(decidedAt))
	if el := time.Since(decidedAt); el > 10*time.Second {
		t.Fatalf("waiters returned %s after the processor started", el)
	}
	// A decided order does not wait.
	start = time.Now()
	if r := orderlytest.Do(t, http.MethodGet, inst.URL+loc+"?wait=20s", nil); r.JSON(t)["status"] != "created" || time.Since(start) > 2*time.Second {
		t.Fatalf("long poll of a decided order took %s", time.Since(start))
	}
}

// TestPreferWaitIsCapped: the server honours wait=N up to --max-wait and says so.
func TestPreferWaitIsCapped(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Projector: true}
	cfg.API.Wait, cfg.API.MaxWait = 0, time.Second
	inst := orderlytest.Start(t, cfg)
	start := time.Now()
	r := inst.PostOrder(t, "cap-1", orderlytest.Order("c-1"), "Prefer: wait=600")
	if r.Status != http.StatusAccepted || r.Header.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("%d, Preference-Applied %q", r.Status, r.Header.Get("Preference-Applied"))
	}
	if el := time.Since(start); el < time.Second || el > 5*time.Second {
		t.Fatalf("waited %s, want about the cap of 1s", el)
	}
	both := inst.PostOrder(t, "cap-2", orderlytest.Order("c-1"), "Prefer: respond-async, wait=1")
	if both.Header.Get("Preference-Applied") != "respond-async, wait=1" {
		t.Fatalf("Preference-Applied %q", both.Header.Get("Preference-Applied"))
	}
}
