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

// DecodeOrder decodes and validates the body of POST /v1/orders. It returns
// the field errors it finds, not only the first (up to MaxFieldErrors, the
// most a problem lists): a malformed body is a single error on the field "". Field names match exactly (case matters) and unknown
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
	req, errs, _ := decodeOrder(body)
	return req, errs
}

// decodeOrder is DecodeOrder that also says how many errors body has:
// errs holds the first MaxFieldErrors of them.
func decodeOrder(body []byte) (req events.OrderRequest, errs []problem.FieldError, total int) {
	if req, ok := decodeValid(body); ok {
		return req, nil, 0
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

// decodeChecked decodes body field by field and reports what is wrong: the
// first MaxFieldErrors errors, and how many there are in all. It holds no
// more than those errors and the known fields' values: a body of thousands
// of unknown fields, which a client may send, is read name by name without
// keeping them (BenchmarkDecodeRefusedBodies).
func decodeChecked(body []byte) (events.OrderRequest, []problem.FieldError, int) {
	var req events.OrderRequest
	if fe := strictJSON(body); fe != nil {
		return req, []problem.FieldError{*fe}, 1
	}
	// body is one valid I-JSON value.
	switch b := bytes.TrimLeft(body, jsonSpace); b[0] {
	case 'n':
		return req, []problem.FieldError{{Field: "", Reason: "the body must be a JSON object, not null"}}, 1
	case '{':
	default:
		return req, []problem.FieldError{{Field: "", Reason: "the body must be a JSON object"}}, 1
	}
	d := decoder{}
	dec := checkedDecoder(body)
	fields := d.object(dec, "", "customer_id", "currency", "items", "total")
	req.CustomerID = d.text("customer_id", fields[0], MaxCustomerIDLen)
	// No length bound of its own: a code of the wrong length is told the rule.
	req.Currency = d.text("currency", fields[1], math.MaxInt)
	if req.Currency != "" && !isCurrency(req.Currency) {
		d.fail("currency", "must be an ISO 4217 code: three upper-case letters such as EUR")
	}
	req.Items = d.items(fields[2])
	if raw := fields[3]; raw != nil && !isNull(raw) {
		if t, ok := d.integer("total", raw, 0, moneyNotInteger); ok {
			req.Total = &t
		}
	}
	if d.total == 0 {
		if _, err := req.Sum(); err != nil {
			d.fail("items", "the sum of quantity*unit_price does not fit in a 64-bit integer")
		}
	}
	if d.total > 0 {
		return events.OrderRequest{}, d.errs, d.total
	}
	return req, nil, 0
}

// knownIndex is the index of name in known, or -1.
func knownIndex(known []string, name []byte) int {
	for k, n := range known {
		if n == string(name) { // compared without a copy
			return k
		}
	}
	return -1
}

// checkedDecoder reads a part of a body that strictJSON found valid: its
// names were checked for duplicates there already.
func checkedDecoder(b []byte) *jsontext.Decoder {
	return jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true))
}

// decoder collects the errors of decodeChecked: the first MaxFieldErrors,
// and how many in all.
type decoder struct {
	errs  []problem.FieldError
	total int
	name  []byte // a member's name, unquoted
}

func (d *decoder) fail(field, reason string) {
	d.total++
	if len(d.errs) < MaxFieldErrors {
		d.errs = append(d.errs, problem.FieldError{Field: field, Reason: reason})
	}
}

// object reads the object dec is at (of a valid I-JSON body) and returns
// the values of the known names, in their order (nil for one not given).
// Each other name is an error, "unknown field", reported in name order; of
// those only the ones the listed errors can hold are kept, and the rest
// counted.
func (d *decoder) object(dec *jsontext.Decoder, prefix string, known ...string) []json.RawMessage {
	values := make([]json.RawMessage, len(known))
	room := max(0, MaxFieldErrors-len(d.errs))
	var listed []string // the first room unknown names in name order, sorted
	unknown := 0
	if _, err := dec.ReadToken(); err != nil { // '{'
		return values
	}
	for dec.PeekKind() == '"' {
		raw, err := dec.ReadValue()
		if err != nil {
			return values
		}
		d.name, err = jsontext.AppendUnquote(d.name[:0], raw)
		if err != nil {
			return values
		}
		value, err := dec.ReadValue()
		if err != nil {
			return values
		}
		if k := knownIndex(known, d.name); k >= 0 {
			values[k] = json.RawMessage(slices.Clone(value))
			continue
		}
		unknown++
		if len(listed) == room && (room == 0 || string(d.name) >= listed[room-1]) {
			continue
		}
		at, _ := slices.BinarySearch(listed, string(d.name))
		if len(listed) == room {
			listed = listed[:room-1]
		}
		listed = slices.Insert(listed, at, string(d.name))
	}
	_, _ = dec.ReadToken() // '}'
	for _, name := range listed {
		reason := "unknown field"
		if k := spelledLike(name, known); k != "" {
			reason += "; did you mean " + k + "?"
		}
		d.fail(prefix+plainName(name), reason)
	}
	d.total += unknown - len(listed)
	return values
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

// moneyNotInteger is the reason for an amount that is not an integer.
const moneyNotInteger = "must be an integer (money is in minor units, such as cents)"

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

// integer decodes a JSON integer of at least min. notInteger is the reason
// given for a number that is not one (1.5, 1e2): what the field counts.
func (d *decoder) integer(field string, raw json.RawMessage, min int64, notInteger string) (int64, bool) {
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
			d.fail(field, notInteger)
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
	n, ok := countObjects(raw)
	switch {
	case !ok:
		d.fail("items", "must be an array of objects")
		return nil
	case n == 0:
		d.fail("items", "must hold at least one item")
		return nil
	case n > MaxItems:
		d.fail("items", fmt.Sprintf("must hold at most %d items", MaxItems))
		return nil
	}
	items := make([]events.Item, n)
	dec := checkedDecoder(raw)
	_, _ = dec.ReadToken() // '['
	for i := range items {
		p := "items[" + strconv.Itoa(i) + "]"
		if dec.PeekKind() == 'n' {
			_, _ = dec.ReadToken()
			d.fail(p, "must be an object")
			continue
		}
		f := d.object(dec, p+".", "sku", "quantity", "unit_price")
		items[i].SKU = d.text(p+".sku", f[0], MaxSKULen)
		items[i].Quantity, _ = d.integer(p+".quantity", f[1], 1, "must be an integer: a whole number of items")
		items[i].UnitPrice, _ = d.integer(p+".unit_price", f[2], 0, moneyNotInteger)
	}
	return items
}

// countObjects counts the elements of the JSON array raw (valid I-JSON); ok
// is false when raw is not an array, or holds an element that is neither an
// object nor null.
func countObjects(raw json.RawMessage) (n int, ok bool) {
	dec := checkedDecoder(raw)
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '[' {
		return 0, false
	}
	for dec.PeekKind() != ']' {
		if k := dec.PeekKind(); k != '{' && k != 'n' {
			return 0, false
		}
		if err := dec.SkipValue(); err != nil {
			return 0, false
		}
		n++
	}
	return n, true
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
