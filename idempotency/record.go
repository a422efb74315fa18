package idempotency

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonr"
)

// State is the state of a key's record.
type State string

const (
	// StatePending: a processor claimed the key for OrderID; no decision is stored yet.
	StatePending State = "pending"
	// StateCompleted: the response for the key is stored and every retry gets it.
	StateCompleted State = "completed"
)

// Record is what a key holds: the response a processor stores as its claim
// of the key, with the decision it made before (StateCompleted, ADR 0009).
// Versions before ADR 0009 claimed with StatePending and had the projector
// store the response afterwards; such records are still read. Its
// encoding is a JSON header line followed by the response body, byte for byte,
// so that a replay sends exactly the stored bytes.
type Record struct {
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
	// DecidedUnixNano is the time of the decision (its event's time) in Unix
	// nanoseconds: with the command it makes the decision again, byte for
	// byte, so that a redelivery stores the event the response was made of.
	// 0 in records of earlier versions.
	DecidedUnixNano int64 `json:"decided_unix_nano,omitempty"`
	// Body is the stored response body.
	Body []byte `json:"-"`
	// Stored is when this value was stored; set by the store that read it.
	Stored time.Time `json:"-"`
	// Seen is when this process learnt the value from the store (its
	// delivery, or a read), on the local clock; zero when not known. The
	// value was in the store's files by then, so with --fsync group a sync
	// that started later made it durable (internal/durable).
	Seen time.Time `json:"-"`
}

// Pending is the claim of a key by orderID for a request with fingerprint.
func Pending(orderID, fingerprint string) Record {
	return Record{State: StatePending, OrderID: orderID, Fingerprint: fingerprint}
}

// Decided is the time of the decision; zero when the record does not say
// (a pending claim, or a record of an earlier version).
func (r Record) Decided() time.Time {
	if r.DecidedUnixNano == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.DecidedUnixNano).UTC()
}

// Completed reports whether r holds a stored response.
func (r Record) Completed() bool { return r.State == StateCompleted }

// Expired reports whether r, stored with a time to live of ttl, has expired at
// now. A record of unknown age (Stored zero) or with ttl 0 never expires.
func (r Record) Expired(ttl time.Duration, now time.Time) bool {
	return ttl > 0 && !r.Stored.IsZero() && now.Sub(r.Stored) >= ttl
}

// Encode is the stored form of r.
func (r Record) Encode() []byte {
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
	if r.DecidedUnixNano != 0 {
		b = append(b, `,"decided_unix_nano":`...)
		b = strconv.AppendInt(b, r.DecidedUnixNano, 10)
	}
	b = append(b, "}\n"...)
	return append(b, r.Body...)
}

// ErrBadRecord is the error of Decode for bytes that are not a record
// orderly writes: damaged, or written by someone else.
var ErrBadRecord = errors.New("idempotency record")

// Decode decodes the stored form of a record.
func Decode(b []byte) (Record, error) {
	var r Record
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return Record{}, fmt.Errorf("%w: no header line", ErrBadRecord)
	}
	if err := jsonr.Unmarshal(b[:i], &r); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if r.State != StatePending && r.State != StateCompleted {
		return Record{}, fmt.Errorf("%w: unknown state %q", ErrBadRecord, r.State)
	}
	// The record is read from a stream that another process wrote: an order
	// ID goes into a Location header and into events (duplicate_of), and the
	// status into the response line, where net/http panics on a code that
	// is not three digits.
	if !events.ValidOrderID(r.OrderID) {
		return Record{}, fmt.Errorf("%w: %q is not an order ID", ErrBadRecord, r.OrderID)
	}
	if r.Completed() && (r.Status < 200 || r.Status > 599) {
		return Record{}, fmt.Errorf("%w: a stored response with status %d", ErrBadRecord, r.Status)
	}
	r.Body = b[i+1:]
	return r, nil
}

// appendString appends s as a JSON string. The header line is written by hand:
// it is on the hot path, and a general encoder costs more than the rest of
// the record.
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
