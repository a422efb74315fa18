// Package jsonw appends JSON values byte for byte as encoding/json (and
// go-json, which matches it for these values) encodes them, without
// reflection or allocation, for the documents written once per order: the
// request's canonical form (its fingerprint), the order's view (the 201
// body) and the OrderCreated event. Each appender accepts only values whose
// encoding has no escapes or replacements and reports ok false otherwise;
// the caller then encodes the whole document with encoding/json, so that
// the bytes never depend on which path made them (stored responses and
// events are compared and replayed byte for byte).
package jsonw

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/orderly-dev/orderly/events"
)

// String appends s quoted when encoding/json would write it unchanged
// between the quotes: valid UTF-8 without control characters, '"', '\\',
// the HTML characters '<', '>', '&' and U+2028, U+2029 (0xE2 leads them;
// any character it leads is left to encoding/json).
func String(b []byte, s string) ([]byte, bool) {
	var seen byte // the classes seen, or-ed
	for i := 0; i < len(s); i++ {
		c := stringClass[s[i]]
		if c == escaped {
			return b, false
		}
		seen |= c
	}
	if seen&multiByte != 0 && !utf8.ValidString(s) {
		return b, false
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// The classes of the bytes of a string for String: one table load a byte
// instead of up to eight comparisons (BenchmarkString, 2026-12-02,
// alternated with the comparisons: 387-594 ns against 954-1,490).
const (
	escaped   byte = 0 // encoding/json escapes or replaces it, or it leads U+2028/U+2029
	plain     byte = 1 // ASCII written as it is
	multiByte byte = 2 // part of a UTF-8 sequence, valid or not
)

var stringClass = func() (t [256]byte) {
	for c := 0; c < 256; c++ {
		switch {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&', c == 0xE2:
			t[c] = escaped
		case c >= 0x80:
			t[c] = multiByte
		default:
			t[c] = plain
		}
	}
	return t
}()

// Writer appends the members of an object; the first value it cannot
// write as encoding/json would sticks (Bytes then reports ok false), as
// bufio.Writer keeps its first error. Its methods return the Writer that
// holds what they appended (w = w.String(...)): a value, so that the buffer
// a caller hands in can stay on its stack. sep is the byte before a member:
// '{' for the first, ',' for the others.
type Writer struct {
	b  []byte
	ok bool
}

// New returns a Writer that appends to b.
func New(b []byte) Writer { return Writer{b: b, ok: true} }

// Bytes returns what was appended, and whether every value could be.
func (w Writer) Bytes() ([]byte, bool) { return w.b, w.ok }

func (w Writer) name(sep byte, name string) Writer {
	w.b = append(w.b, sep, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
	return w
}

// Raw appends JSON text as it is, such as a closing '}'.
func (w Writer) Raw(s string) Writer {
	w.b = append(w.b, s...)
	return w
}

// String appends "name":"value".
func (w Writer) String(sep byte, name, value string) Writer {
	if !w.ok {
		return w
	}
	w = w.name(sep, name)
	w.b, w.ok = String(w.b, value)
	return w
}

// Int appends "name":n.
func (w Writer) Int(sep byte, name string, n int64) Writer {
	if !w.ok {
		return w
	}
	w = w.name(sep, name)
	w.b = strconv.AppendInt(w.b, n, 10)
	return w
}

// Time appends "name":"t" as time.Time.MarshalJSON writes t (RFC 3339
// with the nanoseconds it has); a time not in UTC (zones have edge cases
// MarshalJSON refuses) or with a year it refuses is left to encoding/json.
func (w Writer) Time(sep byte, name string, t time.Time) Writer {
	if !w.ok {
		return w
	}
	if _, off := t.Zone(); off != 0 {
		w.ok = false
		return w
	}
	if y := t.Year(); y < 0 || y > 9999 {
		w.ok = false
		return w
	}
	w = w.name(sep, name)
	w.b = append(w.b, '"')
	w.b = t.AppendFormat(w.b, time.RFC3339Nano)
	w.b = append(w.b, '"')
	return w
}

// Items appends "name":[...] of the items as events.Item encodes (null for
// a nil slice).
func (w Writer) Items(sep byte, name string, items []events.Item) Writer {
	if !w.ok {
		return w
	}
	w = w.name(sep, name)
	if items == nil {
		return w.Raw("null")
	}
	w = w.Raw("[")
	for i, it := range items {
		if i > 0 {
			w = w.Raw(",")
		}
		w = w.String('{', "sku", it.SKU).Int(',', "quantity", it.Quantity).Int(',', "unit_price", it.UnitPrice).Raw("}")
	}
	return w.Raw("]")
}
