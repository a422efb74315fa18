// Package problem renders RFC 9457 problem details, the body of every error
// orderly answers with. Each problem has a stable Code that clients match on;
// Type is the URN form of the code.
package problem

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// ContentType is the media type of a problem document.
const ContentType = "application/problem+json"

// Stable codes. Clients match on these; they never change meaning.
const (
	CodeKeyMissing   = "idempotency_key_missing"
	CodeKeyInvalid   = "idempotency_key_invalid"
	CodeKeyInUse     = "idempotency_key_in_use"
	CodeKeyReused    = "idempotency_key_reused"
	CodeInvalid      = "invalid_request"
	CodeRejected     = "order_rejected"
	CodeTooLarge     = "request_too_large"
	CodeTimeout      = "request_timeout"
	CodeMediaType    = "unsupported_media_type"
	CodeUnauthorized = "unauthorized"
	CodeNotFound     = "not_found"
	CodeUnavailable  = "service_unavailable"
	CodeUnknown      = "outcome_unknown"
	CodeInternal     = "internal_error"
	CodeMethod       = "method_not_allowed"
	CodeNotReady     = "not_ready"
	CodeNotLive      = "not_live"
	CodeSuperseded   = "order_superseded"
	CodeForbidden    = "forbidden"
)

// Codes lists every code, for the documents that must name them all.
var Codes = []string{CodeKeyMissing, CodeKeyInvalid, CodeKeyInUse, CodeKeyReused, CodeInvalid, CodeRejected, CodeTooLarge,
	CodeTimeout, CodeMediaType, CodeUnauthorized, CodeNotFound, CodeUnavailable, CodeUnknown, CodeInternal, CodeMethod,
	CodeNotReady, CodeNotLive, CodeSuperseded, CodeForbidden}

// FieldError is one problem with one field of the request body.
type FieldError struct {
	// Field is the path of the field, such as "items[0].quantity"; empty for the
	// body as a whole.
	Field string `json:"field"`
	// Reason says what is wrong, for a human.
	Reason string `json:"reason"`
}

// Problem is an RFC 9457 problem details document with orderly's extensions.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Code is the stable machine-readable code.
	Code string `json:"code"`
	// Errors lists every field error of an invalid request.
	Errors []FieldError `json:"errors,omitempty"`
	// OrderID names the order the problem is about, when there is one.
	OrderID string `json:"order_id,omitempty"`
	// Reason is the rejection reason of an order_rejected problem.
	Reason string `json:"reason,omitempty"`
	// Checks names each readiness check and its result (not_ready only).
	Checks map[string]string `json:"checks,omitempty"`
}

// New returns a problem with the given status, code, title and detail.
func New(status int, code, title, detail string) *Problem {
	return &Problem{Type: TypeURI(code), Title: title, Status: status, Detail: detail, Code: code}
}

// MaxQuoted is how many bytes of a client's text Quoted keeps.
const MaxQuoted = 128

// Quoted returns text a client sent (a path, a method, a header's value, a
// field's name) for a problem: cut to its first MaxQuoted bytes (whole
// characters, "..." marking the cut), in Go's double-quoted form, so that
// controls, bytes that are not UTF-8 and the marks that reverse text show
// as escapes and a long value is not sent back whole.
func Quoted(s string) string {
	if len(s) > MaxQuoted {
		cut := MaxQuoted
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// TypeURI is the problem type URI of code.
func TypeURI(code string) string { return "urn:orderly:problem:" + code }

// Error makes a Problem usable as an error.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// JSON is the encoded problem.
func (p *Problem) JSON() []byte {
	b, err := json.Marshal(p)
	if err != nil { // cannot happen: only strings, ints and slices of them
		panic(err)
	}
	return b
}
