package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/problem"
)

// retryAfter is the Retry-After of a 503, in seconds, and of a pending
// order when its decision is not delayed (pendingRetryAfter).
const retryAfter = "1"

// pendingRetryAfter is the Retry-After of a pending order (202, 409 for a
// pending original, GET): when its decision may come, in whole seconds.
// accepted is when the order was accepted; zero for one accepted just now,
// or when it is not known (the whole delay then).
func (h *handlers) pendingRetryAfter(accepted time.Time) string {
	if h.cfg.DecisionDelay == nil {
		return retryAfter
	}
	d := h.cfg.DecisionDelay()
	if d > 0 && !accepted.IsZero() {
		d -= max(0, time.Since(accepted)) // accepted "later" (another clock): the whole delay
	}
	if d <= time.Second {
		return retryAfter
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// createOrder is POST /v1/orders.
func (h *handlers) createOrder(c *gin.Context) {
	tenant := h.tenant(c)
	key, kerr := ParseIdempotencyKey(c.Request.Header.Values("Idempotency-Key"))
	if kerr != nil {
		title := "Invalid Idempotency-Key"
		detail := kerr.Detail
		if kerr.Code == problem.CodeKeyMissing {
			title = "Missing Idempotency-Key"
			if name := keyHeaderSpelledLike(c.Request.Header); name != "" {
				detail += "; this request has the header " + name + " instead, and the name is Idempotency-Key"
			}
		}
		writeProblem(c, problem.New(http.StatusBadRequest, kerr.Code, title, detail))
		return
	}
	if p := checkJSON(c.Request.Header); p != nil {
		writeProblem(c, p)
		return
	}
	body, p := h.readBody(c)
	if p != nil {
		writeProblem(c, p)
		return
	}
	req, ferrs, total := decodeOrder(body)
	if ferrs != nil {
		detail := fmt.Sprintf("the order has %d error(s); nothing was stored, so a corrected request may reuse the key", total)
		if total > len(ferrs) {
			detail = fmt.Sprintf("the order has %d errors, the first %d are listed; nothing was stored, so a corrected request may reuse the key", total, len(ferrs))
		}
		p := problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", detail)
		p.Errors = ferrs
		writeProblem(c, p)
		return
	}
	putBody(body)

	prefs := ParsePrefer(c.Request.Header.Values("Prefer"))
	in := app.SubmitOrder{
		Tenant:      tenant,
		KeyHash:     idempotency.KeyHash(tenant, key),
		Fingerprint: idempotency.Fingerprint(req),
		Request:     req,
		Wait:        h.cfg.Wait,
	}
	var applied []string
	if prefs.RespondAsync {
		in.Wait = 0
		applied = append(applied, "respond-async")
	}
	if prefs.HasWait {
		w := min(prefs.Wait, h.cfg.MaxWait)
		in.Wait, in.WaitForPending = w, w
		applied = append(applied, "wait="+strconv.Itoa(int(w/time.Second)))
	}
	if len(applied) > 0 {
		c.Header("Preference-Applied", strings.Join(applied, ", "))
	}

	out, err := h.svc.Submit(c.Request.Context(), in)
	if err != nil {
		h.writeError(c, err)
		return
	}
	h.metrics.outcome(out)
	switch out.Kind {
	case app.Completed:
		writeResult(c, out.Record, out.Replayed)
	case app.Accepted:
		c.Header("Location", idempotency.OrderPath(out.OrderID))
		c.Header("Retry-After", h.pendingRetryAfter(time.Time{}))
		c.Data(http.StatusAccepted, "application/json", pendingBody(out.OrderID))
	case app.InProgress:
		c.Header("Location", idempotency.OrderPath(out.OrderID))
		c.Header("Retry-After", h.pendingRetryAfter(time.Time{}))
		p := problem.New(http.StatusConflict, problem.CodeKeyInUse, "Idempotency key in use",
			"a request with this idempotency key is still being processed; retry later, or send Prefer: wait=N to wait for it")
		p.OrderID = out.OrderID
		writeProblem(c, p)
	default:
		h.writeError(c, fmt.Errorf("unknown outcome %d", out.Kind))
	}
}

func pendingBody(orderID string) []byte {
	return []byte(`{"id":"` + orderID + `","status":"pending"}`)
}

// writeResult sends a stored response: its status, headers and body bytes.
func writeResult(c *gin.Context, r idempotency.Record, replayed bool) {
	hdr := c.Writer.Header()
	if r.Location != "" {
		hdr.Set("Location", r.Location)
	}
	if replayed {
		hdr.Set("Idempotent-Replayed", "true")
	}
	c.Data(r.Status, r.ContentType, r.Body)
}

// MaxFieldErrors is how many field errors a 400 lists at most.
const MaxFieldErrors = 20

// checkJSON accepts one Content-Type field, application/json with no
// parameters but charset=utf-8, and no content coding but identity.
func checkJSON(h http.Header) *problem.Problem {
	bad := func(detail string) *problem.Problem {
		return problem.New(http.StatusUnsupportedMediaType, problem.CodeMediaType, "Unsupported media type", detail)
	}
	if n := len(h.Values("Content-Type")); n > 1 {
		p := problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", fmt.Sprintf("send one Content-Type field, not %d", n))
		p.Errors = []problem.FieldError{{Field: "Content-Type", Reason: "given more than once"}}
		return p
	}
	for _, v := range h.Values("Content-Encoding") {
		for _, coding := range strings.Split(v, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				return bad("Content-Encoding " + problem.Quoted(c) + " is not supported: send the body uncompressed")
			}
		}
	}
	contentType := h.Get("Content-Type")
	if contentType == "" {
		return bad("send the order as Content-Type: application/json")
	}
	if contentType == "application/json" { // what clients send; ParseMediaType allocates a map
		return nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return bad("the body must be application/json, not " + problem.Quoted(contentType))
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return bad("unsupported media type parameter " + problem.Quoted(k+"="+v) + " (only charset=utf-8)")
		}
	}
	return nil
}

// sizeOf says n bytes as --body-limit takes it: "64 KiB (65536 bytes)", or
// "1000 bytes" when n is no whole number of KiB.
func sizeOf(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB (%d bytes)", n>>20, n)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB (%d bytes)", n>>10, n)
	}
	return fmt.Sprintf("%d bytes", n)
}

func (h *handlers) readBody(c *gin.Context) ([]byte, *problem.Problem) {
	tooLarge := func() *problem.Problem {
		return problem.New(http.StatusRequestEntityTooLarge, problem.CodeTooLarge, "Request too large",
			"the body must be at most "+sizeOf(h.cfg.BodyLimit))
	}
	if c.Request.ContentLength > h.cfg.BodyLimit {
		return nil, tooLarge()
	}
	// The HTTP server gives the body a deadline (--http-body-timeout); a body
	// that misses it fails the read with a timeout.
	body, err := readAll(http.MaxBytesReader(c.Writer, c.Request.Body, h.cfg.BodyLimit), c.Request.ContentLength, getBody())
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge()
	case errors.As(err, &ne) && ne.Timeout():
		c.Header("Connection", "close")
		return nil, problem.New(http.StatusRequestTimeout, problem.CodeTimeout, "Request timeout",
			"the body did not arrive in time; nothing was stored, retry with the same idempotency key")
	case err != nil:
		return nil, problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", "the body could not be read: "+err.Error())
	}
	return body, nil
}

// readAll is io.ReadAll into b's memory when it has room for the declared
// length (up to 16 KiB, so that a client that declares much and sends
// little does not make the server hold it), so that an order is read
// without allocating, or into one allocation instead of a growing series
// (bytes.Buffer.ReadFrom would ask for 512 bytes more: it keeps
// bytes.MinRead free for each read). A body longer or shorter than declared
// is read all the same (net/http bounds it by the length).
func readAll(r io.Reader, declared int64, b []byte) ([]byte, error) {
	if declared <= 0 {
		return io.ReadAll(r)
	}
	if want := int(min(declared, maxPooledBody-1)) + 1; cap(b) < want { // +1: the read that sees EOF needs room
		b = make([]byte, 0, want)
	}
	b = b[:0]
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow as io.ReadAll does
		}
	}
}

// maxPooledBody is the largest body buffer kept for the next request.
const maxPooledBody = 16 << 10

// bodies are read buffers of request bodies, kept between requests. A
// buffer goes back only once the body is decoded into a valid order, whose
// strings are copies (TestDecodedOrderOwnsItsStrings): nothing refers to it
// then.
var bodies sync.Pool

func getBody() []byte {
	if b, ok := bodies.Get().(*[]byte); ok {
		return *b
	}
	return nil
}

func putBody(b []byte) {
	if cap(b) <= maxPooledBody {
		bodies.Put(&b)
	}
}

// getOrder is GET /v1/orders/{id}, with ?wait= for long polling.
func (h *handlers) getOrder(c *gin.Context) {
	waits := c.QueryArray("wait")
	if len(waits) > 1 { // which one would the client mean?
		p := problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", "wait is given more than once")
		p.Errors = []problem.FieldError{{Field: "wait", Reason: fmt.Sprintf("is given %d times; give it once", len(waits))}}
		writeProblem(c, p)
		return
	}
	wait, p := h.waitParam(c.Query("wait"))
	if p != nil {
		writeProblem(c, p)
		return
	}
	v, err := h.svc.Order(c.Request.Context(), h.tenant(c), c.Param("id"), wait)
	if err != nil {
		h.writeError(c, err)
		return
	}
	if v.Status == idempotency.StatusPending {
		c.Header("Retry-After", h.pendingRetryAfter(v.AcceptedAt))
	}
	c.Data(http.StatusOK, "application/json", v.Body)
}

// waitParam parses ?wait= as a Go duration ("10s") or whole seconds ("10"),
// capped by MaxWait, whatever its size.
func (h *handlers) waitParam(s string) (time.Duration, *problem.Problem) {
	if s == "" {
		return 0, nil
	}
	if isDigits(s) {
		return capSeconds(s, h.cfg.MaxWait), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) || strings.Contains(err.Error(), "invalid duration") && isDuration(s) {
			return h.cfg.MaxWait, nil // a well-formed duration too large for time.Duration
		}
		p := problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", "wait must be a duration such as 10s")
		p.Errors = []problem.FieldError{{Field: "wait", Reason: "must be a duration such as 10s or whole seconds"}}
		return 0, p
	}
	return min(max(d, 0), h.cfg.MaxWait), nil
}

// isDuration reports whether s has the shape of a positive Go duration
// (digits and units), so that an overflow can be told from garbage.
func isDuration(s string) bool {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c == '.' || strings.IndexByte("nsuµmh", c) >= 0) {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// capSeconds parses whole seconds (digits only), capped at limit.
func capSeconds(s string, limit time.Duration) time.Duration {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > uint64(limit/time.Second)+1 {
		return limit
	}
	return min(time.Duration(n)*time.Second, limit)
}

// getOrderEvents is GET /v1/orders/{id}/events.
func (h *handlers) getOrderEvents(c *gin.Context) {
	b, err := h.svc.OrderEvents(c.Request.Context(), h.tenant(c), c.Param("id"))
	if err != nil {
		h.writeError(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", b)
}

// StatusClientClosedRequest is the status counted (and logged) for a request
// whose client went away before the answer: nginx's 499. Nobody reads it.
const StatusClientClosedRequest = 499

// writeError maps the application's errors to problems.
func (h *handlers) writeError(c *gin.Context, err error) {
	var reused *app.KeyReusedError
	var superseded *app.SupersededError
	switch {
	case c.Request.Context().Err() != nil:
		h.logger.DebugContext(c.Request.Context(), "request abandoned by the client", "err", err)
		writeProblem(c, problem.New(StatusClientClosedRequest, problem.CodeUnavailable, "Client closed request", "the client went away"))
	case errors.As(err, &reused):
		p := problem.New(http.StatusUnprocessableEntity, problem.CodeKeyReused, "Idempotency key reused",
			"this idempotency key was used for a different request; use a new key for a new order")
		p.OrderID = reused.OrderID
		writeProblem(c, p)
	case errors.As(err, &superseded):
		// A keyed order that lost its key to another order, which answers for
		// it (ADR 0010): see the holder, or its events.
		loc := idempotency.OrderPath(superseded.OrderID)
		if strings.HasSuffix(c.FullPath(), "/events") {
			loc += "/events"
		}
		c.Header("Location", loc)
		p := problem.New(http.StatusSeeOther, problem.CodeSuperseded, "Order superseded",
			"this order's idempotency key belongs to another order, which answers for it; this order was not made")
		p.OrderID = superseded.OrderID
		writeProblem(c, p)
	case errors.Is(err, app.ErrNotFound):
		writeProblem(c, problem.New(http.StatusNotFound, problem.CodeNotFound, "Order not found", "no order with this id"))
	case errors.Is(err, app.ErrOutcomeUnknown):
		h.logger.WarnContext(c.Request.Context(), "command outcome unknown", "err", err)
		c.Header("Retry-After", retryAfter)
		writeProblem(c, problem.New(http.StatusServiceUnavailable, problem.CodeUnknown, "Outcome unknown",
			"the order store did not confirm the order in time; it may have been accepted: retry with the same idempotency key to learn the outcome"))
	case errors.Is(err, app.ErrUnavailable):
		h.logger.WarnContext(c.Request.Context(), "order store unavailable", "err", err)
		c.Header("Retry-After", retryAfter)
		detail := "the order store is unavailable; retry later"
		if c.Request.Method == http.MethodPost {
			detail = "the order store is unavailable and nothing was stored; retry with the same idempotency key"
		}
		writeProblem(c, problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable, "Service unavailable", detail))
	default:
		h.logger.ErrorContext(c.Request.Context(), "request failed", "path", c.Request.URL.Path, "err", err)
		writeProblem(c, problem.New(http.StatusInternalServerError, problem.CodeInternal, "Internal error", "an unexpected error occurred"))
	}
}

func writeProblem(c *gin.Context, p *problem.Problem) {
	c.Data(p.Status, problem.ContentType, p.JSON())
}
