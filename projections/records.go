package projections

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	gojson "github.com/goccy/go-json"
)

// State is the state of a key in ORDER_RESULTS.
type State string

const (
	// StatePending: a processor claimed the key for OrderID; no decision is stored yet.
	StatePending State = "pending"
	// StateCompleted: the response for the key is stored and every retry gets it.
	StateCompleted State = "completed"
)

// Result is the value of a key in ORDER_RESULTS: first the claim a processor
// writes (StatePending), then the response the projector stores (StateCompleted).
// Its encoding is a JSON header line followed by the response body, byte for
// byte, so that a replay sends exactly the stored bytes.
type Result struct {
	// State is pending or completed.
	State State `json:"state"`
	// OrderID is the order the key belongs to.
	OrderID string `json:"order_id"`
	// Fingerprint is the request fingerprint of that order.
	Fingerprint string `json:"fingerprint"`
	// Status is the HTTP status of the stored response (completed only).
	Status int `json:"status,omitempty"`
	// Location is the Location header of the stored response.
	Location string `json:"location,omitempty"`
	// ContentType is the Content-Type header of the stored response.
	ContentType string `json:"content_type,omitempty"`
	// Body is the stored response body.
	Body []byte `json:"-"`
	// Stored is when this value was stored; set when read from the bucket.
	Stored time.Time `json:"-"`
}

// Completed reports whether r holds a stored response.
func (r Result) Completed() bool { return r.State == StateCompleted }

// Encode is the bucket value of r.
func (r Result) Encode() []byte {
	b := make([]byte, 0, 160+len(r.Body))
	b = append(b, `{"state":`...)
	b = appendString(b, string(r.State))
	b = append(b, `,"order_id":`...)
	b = appendString(b, r.OrderID)
	b = append(b, `,"fingerprint":`...)
	b = appendString(b, r.Fingerprint)
	if r.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(r.Status), 10)
	}
	if r.Location != "" {
		b = append(b, `,"location":`...)
		b = appendString(b, r.Location)
	}
	if r.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = appendString(b, r.ContentType)
	}
	b = append(b, "}\n"...)
	return append(b, r.Body...)
}

// DecodeResult decodes a bucket value.
func DecodeResult(b []byte) (Result, error) {
	var r Result
	body, err := decodeRecord(b, &r)
	if err != nil {
		return Result{}, fmt.Errorf("result record: %w", err)
	}
	if r.State != StatePending && r.State != StateCompleted {
		return Result{}, fmt.Errorf("result record: unknown state %q", r.State)
	}
	r.Body = body
	return r, nil
}

// OrderStatus is the status of an order as GET /v1/orders/{id} shows it.
type OrderStatus string

const (
	// StatusPending: accepted, not decided yet.
	StatusPending OrderStatus = "pending"
	// StatusCreated: the order was created.
	StatusCreated OrderStatus = "created"
	// StatusRejected: the order was rejected.
	StatusRejected OrderStatus = "rejected"
)

// Order is an order as GET /v1/orders/{id} serves it: who owns it, its
// status, and its JSON representation. It is rendered from the order's event
// (or its command while pending), not stored.
type Order struct {
	// Tenant owns the order; other tenants do not see it.
	Tenant string
	// Status is pending, created or rejected.
	Status OrderStatus
	// Body is the JSON representation of the order.
	Body []byte
}

// appendString appends s as a JSON string. The header lines are written by
// hand: they are on the hot path, and a general encoder costs more than the
// rest of the record.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func decodeRecord(b []byte, header any) (body []byte, err error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, errors.New("no header line")
	}
	if err := gojson.Unmarshal(b[:i], header); err != nil {
		return nil, err
	}
	return b[i+1:], nil
}
