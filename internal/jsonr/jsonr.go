// Package jsonr reads the documents orderly reads once per order (the
// command in the processor, the event in the API's feed) in one pass over
// their bytes, without reflection, as go-json decodes them. A Decoder takes
// only what it can read exactly as go-json would: JSON without escapes in
// its strings, the names as written (case matters), each once, integers,
// and times as time.Time.UnmarshalJSON reads them. On anything else (an
// unknown name, a null, an escape, a number with a fraction, a syntax
// error) it stops with ok false and the caller decodes the document with
// go-json, so that what is decoded never depends on which path did it (each
// reader's fuzz test compares the two).
package jsonr

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"
	"unsafe"

	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
)

// Decoder reads one document; the first thing it cannot read sticks (End
// then reports false, and every read returns a zero value). Its strings
// share the document's bytes, uncopied: the document must not change while
// they are in use (orderly decodes only messages it was handed, whose bytes
// nobody writes again), and a reader whose values outlive the document by
// long (a cache) copies them.
type Decoder struct {
	b   []byte
	doc string
	i   int
	ok  bool
}

// New returns a Decoder of data.
func New(data []byte) Decoder { return Decoder{b: data, ok: true} }

// Fail stops d: a reader met a name or a value it does not take.
func (d *Decoder) Fail() { d.ok = false }

func (d *Decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next byte that is not white space, 0 at the end.
func (d *Decoder) peek() byte {
	d.space()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *Decoder) expect(c byte) {
	if d.ok && d.peek() == c {
		d.i++
		return
	}
	d.ok = false
}

// Object reads the '{' of an object; each member is then read by a call
// of Member and of a value's reader.
func (d *Decoder) Object() Members {
	d.expect('{')
	return Members{first: true}
}

// Members is the state of an object being read.
type Members struct {
	first bool
	seen  uint64
}

// Member reads the next member's name (as written, between its quotes)
// and the ':' after it; more is false at the object's '}'. The reader then
// calls Once with the name's number, so that a name given twice stops d
// (go-json keeps the last; the reader would have to agree on which).
func (d *Decoder) Member(m *Members) (name []byte, more bool) {
	if !d.ok {
		return nil, false
	}
	c := d.peek()
	if c == '}' {
		d.i++
		return nil, false
	}
	if !m.first {
		if c != ',' {
			d.ok = false
			return nil, false
		}
		d.i++
	}
	m.first = false
	name, ok := d.raw()
	if !ok {
		d.ok = false
		return nil, false
	}
	d.expect(':')
	return name, d.ok
}

// Once marks member n (0 to 63) as read; a second time stops d.
func (d *Decoder) Once(m *Members, n uint) {
	if m.seen&(1<<n) != 0 {
		d.ok = false
	}
	m.seen |= 1 << n
}

// End reads the end of the document: nothing but white space may follow.
func (d *Decoder) End() bool {
	if d.ok {
		d.space()
		d.ok = d.i == len(d.b) // a NUL byte is trailing data too
	}
	return d.ok
}

// raw reads a string without escapes or control characters, in valid
// UTF-8, and returns what is between its quotes.
func (d *Decoder) raw() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	rest := d.b[d.i+1:]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil, false
	}
	s := rest[:j]
	var all byte
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
		all |= c
	}
	if all >= 0x80 && !utf8.Valid(s) {
		return nil, false
	}
	d.i += j + 2
	return s, true
}

// String reads a string (not null).
func (d *Decoder) String() string {
	if !d.ok {
		return ""
	}
	s, ok := d.raw()
	if !ok {
		d.ok = false
		return ""
	}
	if d.doc == "" {
		d.doc = unsafe.String(unsafe.SliceData(d.b), len(d.b)) // the document's bytes, for every string of it
	}
	from := d.i - 1 - len(s) // d.i is past the closing quote
	return d.doc[from : from+len(s)]
}

// Int reads an integer that fits in an int64, without fraction or
// exponent.
func (d *Decoder) Int() int64 {
	if !d.ok {
		return 0
	}
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	v := d.b[digits:d.i]
	if len(v) == 0 || len(v) > 1 && v[0] == '0' {
		d.ok = false
		return 0
	}
	if d.i < len(d.b) {
		if c := d.b[d.i]; c == '.' || c == 'e' || c == 'E' {
			d.ok = false
			return 0
		}
	}
	n, ok := ParseInt(d.b[start:d.i])
	d.ok = ok
	return n
}

// Bool reads true or false.
func (d *Decoder) Bool() bool {
	if !d.ok {
		return false
	}
	d.space()
	rest := d.b[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		d.i += 4
		d.delimited()
		return true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		d.i += 5
		d.delimited()
		return false
	}
	d.ok = false
	return false
}

// delimited stops d unless a literal just read ends where it should
// (truex is not true).
func (d *Decoder) delimited() {
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r', ',', '}', ']':
		default:
			d.ok = false
		}
	}
}

// Time reads a time as time.Time.UnmarshalJSON does.
func (d *Decoder) Time() time.Time {
	var t time.Time
	if !d.ok {
		return t
	}
	start := d.i
	if _, ok := d.raw(); !ok {
		d.ok = false
		return t
	}
	q := d.b[start:d.i]
	for q[0] != '"' { // the white space before it
		q = q[1:]
	}
	if t.UnmarshalJSON(q) != nil {
		d.ok = false
	}
	return t
}

// Items reads an array of order lines (not null).
func (d *Decoder) Items() []events.Item {
	d.expect('[')
	if !d.ok {
		return nil
	}
	var buf [16]events.Item // most orders fit: one exact allocation when they do
	items := buf[:0]
	if d.peek() == ']' {
		d.i++
		return []events.Item{}
	}
	for d.ok {
		var it events.Item
		m := d.Object()
		for name, more := d.Member(&m); more; name, more = d.Member(&m) {
			switch string(name) {
			case "sku":
				d.Once(&m, 0)
				it.SKU = d.String()
			case "quantity":
				d.Once(&m, 1)
				it.Quantity = d.Int()
			case "unit_price":
				d.Once(&m, 2)
				it.UnitPrice = d.Int()
			default:
				d.Fail()
			}
		}
		items = append(items, it)
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return slices.Clone(items)
		default:
			d.ok = false
		}
	}
	return nil
}

// Request reads an order as events.OrderRequest (a null total is left to
// go-json).
func (d *Decoder) Request() (r events.OrderRequest) {
	m := d.Object()
	for name, more := d.Member(&m); more; name, more = d.Member(&m) {
		switch string(name) {
		case "customer_id":
			d.Once(&m, 0)
			r.CustomerID = d.String()
		case "currency":
			d.Once(&m, 1)
			r.Currency = d.String()
		case "items":
			d.Once(&m, 2)
			r.Items = d.Items()
		case "total":
			d.Once(&m, 3)
			t := d.Int()
			r.Total = &t
		default:
			d.Fail()
		}
	}
	return r
}

// CreateOrder decodes a command as go-json does; ok is false when it is
// left to go-json.
func CreateOrder(data []byte) (cmd events.CreateOrder, ok bool) {
	d := New(data)
	m := d.Object()
	for name, more := d.Member(&m); more; name, more = d.Member(&m) {
		switch string(name) {
		case "type":
			d.Once(&m, 0)
			cmd.Type = d.String()
		case "id_form":
			d.Once(&m, 1)
			cmd.IDForm = d.String()
		case "nonce":
			d.Once(&m, 2)
			cmd.Nonce = d.String()
		case "tenant":
			d.Once(&m, 3)
			cmd.Tenant = d.String()
		case "key_hash":
			d.Once(&m, 4)
			cmd.KeyHash = d.String()
		case "fingerprint":
			d.Once(&m, 5)
			cmd.Fingerprint = d.String()
		case "accepted_at":
			d.Once(&m, 6)
			cmd.AcceptedAt = d.Time()
		case "request":
			d.Once(&m, 7)
			cmd.Request = d.Request()
		case "traceparent":
			d.Once(&m, 8)
			cmd.TraceParent = d.String()
		case "tracestate":
			d.Once(&m, 9)
			cmd.TraceState = d.String()
		default:
			d.Fail()
		}
	}
	return cmd, d.End()
}

// ParseInt parses the text of a valid JSON number as strconv.ParseInt
// does, without allocating: ok is false for a fraction, an exponent or a
// value outside int64.
func ParseInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0') // 19 digits fit in a uint64
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	case neg && u <= -math.MinInt64:
		return -int64(u), true
	}
	return 0, false
}

// DecodeCreateOrder decodes a command: in one pass when CreateOrder takes
// it, with go-json otherwise.
func DecodeCreateOrder(data []byte) (events.CreateOrder, error) {
	if cmd, ok := CreateOrder(data); ok {
		return cmd, nil
	}
	var cmd events.CreateOrder
	err := Unmarshal(data, &cmd)
	return cmd, err
}

// Unmarshal is go-json's Unmarshal for bytes from outside the process (a
// request, a message on a stream), with a panic of go-json returned as an
// error. go-json reads its input through unsafe pointers, and v0.10.5 read
// past the end of some malformed input and panicked (found by
// FuzzDecodeRecord; v0.12.0 reads it right): in the callback of a feed,
// such a panic would stop the whole process.
func Unmarshal(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("json: malformed input (%v)", r)
		}
	}()
	return gojson.Unmarshal(data, v)
}
