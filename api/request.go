package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonr"
	"github.com/orderly-dev/orderly/internal/problem"
)

// Limits of a request body's fields.
const (
	MaxItems         = 1000
	MaxCustomerIDLen = 128
	MaxSKULen        = 64
)

// DecodeOrder decodes (go-json) and validates the body of POST /v1/orders. It returns
// every field error it finds, not only the first: a malformed body is a single
// error on the field "". Field names match exactly (case matters) and unknown
// fields are errors, so that a typo is not silently ignored.
//
// The body must be I-JSON (RFC 7493), because the fingerprint is computed
// over the decoded request: a name given twice (which value counts?), invalid
// UTF-8 and lone surrogates (both decode to U+FFFD, so two different bodies
// would be one request) and numbers with leading zeros are errors.
//
// A valid order is decoded in one pass (decodeValid); any other body is
// decoded again, field by field, for the list of what is wrong.
func DecodeOrder(body []byte) (events.OrderRequest, []problem.FieldError) {
	if req, ok := decodeValid(body); ok {
		return req, nil
	}
	return decodeChecked(body)
}

// decodeValid decodes body when it is a valid order, in one pass over its
// tokens (jsontext: duplicate names, invalid UTF-8 and trailing data refused),
// without reflection, and applies the checks of decodeChecked to the values.
// ok is false for anything else, and then decodeChecked says why:
// decodeValid accepts no body that decodeChecked refuses, and decodes every
// body it accepts to the same request (FuzzDecodeOrder checks both). It may
// leave a valid body to decodeChecked too: a name written with escapes is one.
func decodeValid(body []byte) (req events.OrderRequest, ok bool) {
	p := decoders.Get().(*pooledDecoder)
	p.r.Reset(body)
	p.d.Reset(&p.r)
	req, ok = readOrder(&p.d)
	p.r.Reset(nil) // do not keep the body alive in the pool
	decoders.Put(p)
	return req, ok
}

// pooledDecoder is a jsontext decoder kept between requests with its
// reader: its buffer, its stack and the names it has seen are reused.
type pooledDecoder struct {
	d jsontext.Decoder
	r bytes.Reader
}

var decoders = sync.Pool{New: func() any { return new(pooledDecoder) }}

// readOrder reads one order object and the end of the input.
func readOrder(d *jsontext.Decoder) (req events.OrderRequest, ok bool) {
	if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
		return req, false
	}
	var haveCustomer, haveCurrency bool
	for d.PeekKind() == '"' {
		name, err := d.ReadValue()
		if err != nil {
			return req, false
		}
		switch string(name) {
		case `"customer_id"`:
			req.CustomerID, ok = readText(d, MaxCustomerIDLen)
			haveCustomer = true
		case `"currency"`:
			req.Currency, ok = readText(d, 3)
			ok = ok && isCurrency(req.Currency)
			haveCurrency = true
		case `"items"`:
			req.Items, ok = readItems(d)
		case `"total"`:
			if d.PeekKind() == 'n' {
				_, err := d.ReadValue()
				ok = err == nil
				break
			}
			var t int64
			t, ok = readInteger(d, 0)
			req.Total = &t
		default: // an unknown name, or a known one written with escapes
			return req, false
		}
		if !ok {
			return req, false
		}
	}
	if t, err := d.ReadToken(); err != nil || t.Kind() != '}' {
		return req, false
	}
	if _, err := d.ReadToken(); err != io.EOF { // trailing data, or a syntax error
		return req, false
	}
	if !haveCustomer || !haveCurrency || req.Items == nil {
		return req, false
	}
	if _, err := req.Sum(); err != nil {
		return req, false
	}
	return req, true
}

// readItems reads the items array: 1 to MaxItems objects of sku, quantity
// and unit_price, each given once.
func readItems(d *jsontext.Decoder) ([]events.Item, bool) {
	if t, err := d.ReadToken(); err != nil || t.Kind() != '[' {
		return nil, false
	}
	var buf [16]events.Item // most orders fit: one exact allocation when they do
	items := buf[:0]
	for d.PeekKind() == '{' {
		if len(items) == MaxItems {
			return nil, false
		}
		it, ok := readItem(d)
		if !ok {
			return nil, false
		}
		items = append(items, it)
	}
	if t, err := d.ReadToken(); err != nil || t.Kind() != ']' || len(items) == 0 {
		return nil, false
	}
	return slices.Clone(items), true
}

func readItem(d *jsontext.Decoder) (it events.Item, ok bool) {
	if _, err := d.ReadToken(); err != nil { // the '{' PeekKind saw
		return it, false
	}
	var haveSKU, haveQ, haveP bool
	for d.PeekKind() == '"' {
		name, err := d.ReadValue()
		if err != nil {
			return it, false
		}
		switch string(name) {
		case `"sku"`:
			it.SKU, ok = readText(d, MaxSKULen)
			haveSKU = true
		case `"quantity"`:
			it.Quantity, ok = readInteger(d, 1)
			haveQ = true
		case `"unit_price"`:
			it.UnitPrice, ok = readInteger(d, 0)
			haveP = true
		default:
			return it, false
		}
		if !ok {
			return it, false
		}
	}
	if t, err := d.ReadToken(); err != nil || t.Kind() != '}' {
		return it, false
	}
	return it, haveSKU && haveQ && haveP
}

// readText reads a string of 1 to maxLen characters without control
// characters, as text requires.
func readText(d *jsontext.Decoder, maxLen int) (string, bool) {
	if d.PeekKind() != '"' {
		return "", false
	}
	v, err := d.ReadValue()
	if err != nil {
		return "", false
	}
	var s string
	if raw := v[1 : len(v)-1]; bytes.IndexByte(raw, '\\') < 0 {
		s = string(raw) // valid UTF-8: the decoder checked it
	} else {
		b, err := jsontext.AppendUnquote(nil, v)
		if err != nil {
			return "", false
		}
		s = string(b)
	}
	n := utf8.RuneCountInString(s)
	return s, n > 0 && n <= maxLen && !hasControl(s)
}

// readInteger reads a JSON integer of at least min, as integer requires: a
// number without fraction or exponent that fits in an int64.
func readInteger(d *jsontext.Decoder, min int64) (int64, bool) {
	if d.PeekKind() != '0' {
		return 0, false
	}
	v, err := d.ReadValue()
	if err != nil {
		return 0, false
	}
	n, ok := jsonr.ParseInt(v)
	return n, ok && n >= min
}

// decodeChecked decodes body field by field and reports every problem.
func decodeChecked(body []byte) (events.OrderRequest, []problem.FieldError) {
	var req events.OrderRequest
	if fe := strictJSON(body); fe != nil {
		return req, []problem.FieldError{*fe}
	}
	var fields map[string]json.RawMessage
	if err := jsonr.Unmarshal(body, &fields); err != nil {
		return req, []problem.FieldError{{Field: "", Reason: jsonReason(err, body)}}
	}
	if fields == nil { // the body was null
		return req, []problem.FieldError{{Field: "", Reason: "the body must be a JSON object, not null"}}
	}
	d := decoder{}
	d.unknown("", fields, "customer_id", "currency", "items", "total")
	req.CustomerID = d.text("customer_id", fields["customer_id"], MaxCustomerIDLen)
	// No length bound of its own: a code of the wrong length is told the rule.
	req.Currency = d.text("currency", fields["currency"], math.MaxInt)
	if req.Currency != "" && !isCurrency(req.Currency) {
		d.fail("currency", "must be an ISO 4217 code: three upper-case letters such as EUR")
	}
	req.Items = d.items(fields["items"])
	if raw, ok := fields["total"]; ok && !isNull(raw) {
		if t, ok := d.integer("total", raw, 0); ok {
			req.Total = &t
		}
	}
	if len(d.errs) == 0 {
		if _, err := req.Sum(); err != nil {
			d.fail("items", "the sum of quantity*unit_price does not fit in a 64-bit integer")
		}
	}
	if len(d.errs) > 0 {
		return events.OrderRequest{}, d.errs
	}
	return req, nil
}

type decoder struct{ errs []problem.FieldError }

func (d *decoder) fail(field, reason string) {
	d.errs = append(d.errs, problem.FieldError{Field: field, Reason: reason})
}

// unknown reports the fields of obj that are not known, in name order.
func (d *decoder) unknown(prefix string, obj map[string]json.RawMessage, known ...string) {
	var names []string
	for name := range obj {
		if !slices.Contains(known, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		reason := "unknown field"
		// Only for the errors a problem lists: a body of thousands of
		// unknown fields is not worth a hint each.
		if len(d.errs) < MaxFieldErrors {
			if k := spelledLike(name, known); k != "" {
				reason += "; did you mean " + k + "?"
			}
		}
		d.fail(prefix+plainName(name), reason)
	}
}

// spelledLike names the known field that name spells another way, in
// another case or with other separators (customerId, CustomerID and
// customer-id for customer_id: the names a client that maps its own
// camelCase or PascalCase type sends), or is "".
func spelledLike(name string, known []string) string {
	if len(name) > 64 {
		return ""
	}
	folded := foldName(name)
	for _, k := range known {
		if foldName(k) == folded {
			return k
		}
	}
	return ""
}

// foldName is name in lower case without '_', '-', '.' and spaces.
func foldName(name string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', '.', ' ':
			return -1
		}
		return unicode.ToLower(r)
	}, name)
}

// plainName is a field name the client sent, as a field error names it: as
// it is when it is short and printable, else quoted and cut
// (problem.Quoted), so that no control character or mark that reverses
// text is sent back raw.
func plainName(name string) string {
	if len(name) > 64 || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) || r == '"' || r == '\\' }) >= 0 || !utf8.ValidString(name) {
		return problem.Quoted(name)
	}
	return name
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(raw, []byte("null")) }

// text decodes a required non-empty string of at most maxLen characters
// without control characters.
func (d *decoder) text(field string, raw json.RawMessage, maxLen int) string {
	if raw == nil || isNull(raw) {
		d.fail(field, "is required")
		return ""
	}
	var s string
	if err := jsonr.Unmarshal(raw, &s); err != nil {
		if raw[0] == '"' {
			d.fail(field, "must be a valid UTF-8 string")
		} else {
			d.fail(field, "must be a string")
		}
		return ""
	}
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0:
		d.fail(field, "must not be empty")
	case n > maxLen:
		d.fail(field, fmt.Sprintf("must be at most %d characters long", maxLen))
	case hasControl(s):
		d.fail(field, "must not contain control characters")
	default:
		return s
	}
	return ""
}

// hasControl reports whether s holds a control character: C0, DEL or C1
// (Unicode's Cc; a terminal may take U+009B for an escape sequence).
func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return true
		}
	}
	return false
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// integer decodes a JSON integer of at least min.
func (d *decoder) integer(field string, raw json.RawMessage, min int64) (int64, bool) {
	if raw == nil || isNull(raw) {
		d.fail(field, "is required")
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		switch {
		case errors.Is(err, strconv.ErrRange):
			d.fail(field, "is out of range for a 64-bit integer")
		case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
			d.fail(field, "must be an integer (money is in minor units, such as cents)")
		case raw[0] == '"':
			d.fail(field, "must be an integer, not a string")
		default:
			d.fail(field, "must be an integer")
		}
		return 0, false
	}
	if n < min {
		d.fail(field, fmt.Sprintf("must be at least %d", min))
		return 0, false
	}
	return n, true
}

func (d *decoder) items(raw json.RawMessage) []events.Item {
	if raw == nil || isNull(raw) {
		d.fail("items", "is required")
		return nil
	}
	var list []map[string]json.RawMessage
	if err := jsonr.Unmarshal(raw, &list); err != nil {
		d.fail("items", "must be an array of objects")
		return nil
	}
	switch {
	case len(list) == 0:
		d.fail("items", "must hold at least one item")
		return nil
	case len(list) > MaxItems:
		d.fail("items", fmt.Sprintf("must hold at most %d items", MaxItems))
		return nil
	}
	items := make([]events.Item, len(list))
	for i, f := range list {
		p := "items[" + strconv.Itoa(i) + "]"
		if f == nil {
			d.fail(p, "must be an object")
			continue
		}
		d.unknown(p+".", f, "sku", "quantity", "unit_price")
		items[i].SKU = d.text(p+".sku", f["sku"], MaxSKULen)
		items[i].Quantity, _ = d.integer(p+".quantity", f["quantity"], 1)
		items[i].UnitPrice, _ = d.integer(p+".unit_price", f["unit_price"], 0)
	}
	return items
}

func jsonReason(err error, body []byte) string {
	if b := bytes.TrimLeft(body, jsonSpace); len(b) > 0 && b[0] != '{' && b[0] != 'n' {
		return "the body must be a JSON object"
	}
	var syn *gojson.SyntaxError
	if errors.As(err, &syn) {
		msg := strings.TrimPrefix(syn.Error(), "json: ")
		if strings.Contains(msg, "unexpected end of JSON input") {
			msg = "unexpected end of JSON input"
		}
		return fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, msg)
	}
	return "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}

// jsonSpace is the white space JSON allows between tokens.
const jsonSpace = " \t\r\n"

// strictJSON reports what makes body not I-JSON, on the field it concerns.
func strictJSON(body []byte) *problem.FieldError {
	if jsontext.Value(body).IsValid() {
		return nil
	}
	if len(bytes.TrimLeft(body, jsonSpace)) == 0 {
		return &problem.FieldError{Field: "", Reason: "the body is empty; send the order as a JSON object"}
	}
	d := jsontext.NewDecoder(bytes.NewReader(body))
	_, err := d.ReadValue()
	if err == nil { // one whole value, and something after it
		if b := bytes.TrimLeft(body, jsonSpace); b[0] != '{' {
			return &problem.FieldError{Field: "", Reason: "the body must be a JSON object"}
		}
		rest := body[d.InputOffset():]
		at := len(body) - len(bytes.TrimLeft(rest, jsonSpace))
		return &problem.FieldError{Field: "", Reason: fmt.Sprintf("malformed JSON after byte %d: data after the JSON object; send one object", at)}
	}
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &problem.FieldError{Field: "", Reason: "unexpected end of JSON input"}
		}
		return &problem.FieldError{Field: "", Reason: "malformed JSON: " + strings.TrimPrefix(err.Error(), "jsontext: ")}
	}
	field := pointerField(string(se.JSONPointer))
	msg := se.Err.Error()
	switch {
	case errors.Is(se.Err, jsontext.ErrDuplicateName): // the pointer names the repeated field
		return &problem.FieldError{Field: field, Reason: "appears more than once; send each field once"}
	case strings.Contains(msg, "invalid UTF-8"):
		return &problem.FieldError{Field: field, Reason: fmt.Sprintf("must be valid UTF-8 (invalid byte after offset %d)", se.ByteOffset)}
	case strings.Contains(msg, "surrogate"):
		return &problem.FieldError{Field: field, Reason: `holds a \u escape of a lone UTF-16 surrogate; escape a character outside the BMP as a pair`}
	}
	if b := bytes.TrimLeft(body, jsonSpace); len(b) > 0 && b[0] != '{' && b[0] != 'n' {
		return &problem.FieldError{Field: "", Reason: "the body must be a JSON object"}
	}
	if errors.Is(se.Err, io.ErrUnexpectedEOF) {
		msg = "unexpected end of JSON input"
	}
	return &problem.FieldError{Field: "", Reason: fmt.Sprintf("malformed JSON after byte %d: %s", se.ByteOffset, msg)}
}

// pointerField turns a JSON pointer such as /items/0/sku into items[0].sku.
func pointerField(ptr string) string {
	if ptr == "" {
		return ""
	}
	var b strings.Builder
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}
