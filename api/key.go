package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/orderly-dev/orderly/internal/problem"
)

// MaxKeyLength is the longest idempotency key accepted, in characters.
const MaxKeyLength = 255

// KeyError is a problem with the Idempotency-Key header; Code is
// idempotency_key_missing or idempotency_key_invalid.
type KeyError struct {
	Code   string
	Detail string
}

func (e *KeyError) Error() string { return e.Code + ": " + e.Detail }

func keyInvalid(format string, a ...any) *KeyError {
	return &KeyError{Code: problem.CodeKeyInvalid, Detail: fmt.Sprintf(format, a...)}
}

// ParseIdempotencyKey parses the values of the Idempotency-Key header fields.
//
// The key is a Structured Field string as in draft-ietf-httpapi-idempotency-key-header
// ("..." with \" and \\ as the only escapes) or the same value bare; after
// unquoting it is 1 to 255 characters of visible ASCII (0x21-0x7E). Quoted and
// bare forms are the same key. Structured Field parameters (RFC 9651:
// ;name or ;name=value after the key) are allowed in both forms and ignored:
// "abc";p=1 and abc;p=1 are the key abc. So a bare key ends at its first
// semicolon, and must not start with a quote or hold a comma (a comma is how
// HTTP joins repeated fields): quote a key that holds either. No field, or an
// empty one, is idempotency_key_missing; two fields or any other defect is
// idempotency_key_invalid.
func ParseIdempotencyKey(values []string) (string, *KeyError) {
	switch len(values) {
	case 0:
		return "", &KeyError{Code: problem.CodeKeyMissing, Detail: "the Idempotency-Key header is required"}
	case 1:
	default:
		return "", keyInvalid("send exactly one Idempotency-Key header, not %d", len(values))
	}
	v := strings.Trim(values[0], " \t")
	if v == "" || v == `""` {
		return "", &KeyError{Code: problem.CodeKeyMissing, Detail: "the Idempotency-Key header is empty"}
	}
	var key, params string
	if v[0] == '"' {
		var err *KeyError
		if key, params, err = unquote(v); err != nil {
			return "", err
		}
	} else {
		key, params = v, ""
		if i := strings.IndexByte(v, ';'); i >= 0 {
			key, params = v[:i], v[i:]
		}
		if strings.IndexByte(key, ',') >= 0 {
			return "", keyInvalid("a bare idempotency key must not contain a comma (two Idempotency-Key fields?); quote it")
		}
		if key == "" {
			return "", &KeyError{Code: problem.CodeKeyMissing, Detail: "the Idempotency-Key header has parameters but no key"}
		}
	}
	if err := checkParams(params); err != nil {
		return "", err
	}
	if len(key) > MaxKeyLength {
		return "", keyInvalid("the idempotency key has %d characters; at most %d are allowed", len(key), MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return "", keyInvalid("the idempotency key may hold only visible ASCII characters; found byte 0x%02x at position %d", c, i)
		}
	}
	return key, nil
}

// unquote parses a Structured Field string (RFC 9651 section 3.3.3) at the
// start of v and returns it and what follows (its parameters).
func unquote(v string) (key, rest string, _ *KeyError) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", "", keyInvalid(`in a quoted idempotency key a backslash may only escape " or \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if b.Len() == 0 {
				return "", "", &KeyError{Code: problem.CodeKeyMissing, Detail: "the Idempotency-Key header is empty"}
			}
			return b.String(), v[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", keyInvalid("the idempotency key may hold only visible ASCII characters; found byte 0x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", keyInvalid("the quoted idempotency key has no closing quote")
}

// checkParams checks Structured Field parameters (RFC 9651 section 3.1.2):
// *( ";" *SP key [ "=" bare-item ] ), key = ( lcalpha / "*" ) *( lcalpha /
// DIGIT / "_" / "-" / "." / "*" ). Values are a token, a number, a string, a
// byte sequence or a boolean; their meaning is ignored.
func checkParams(p string) *KeyError {
	bad := func(why string) *KeyError {
		return keyInvalid("the parameters after the idempotency key (%s) are not Structured Field parameters: %s", problem.Quoted(p), why)
	}
	for p != "" {
		if p[0] != ';' {
			return bad("unexpected characters after the key; quote a key that holds them")
		}
		p = strings.TrimLeft(p[1:], " ")
		n := 0
		for n < len(p) && (p[n] >= 'a' && p[n] <= 'z' || p[n] == '*' || n > 0 && (p[n] >= '0' && p[n] <= '9' || strings.IndexByte("_-.", p[n]) >= 0)) {
			n++
		}
		if n == 0 {
			return bad("a parameter name starts with a lower-case letter or *")
		}
		p = p[n:]
		if p == "" || p[0] == ';' {
			continue
		}
		if p[0] != '=' {
			return bad("expected = or ; after a parameter name")
		}
		p = p[1:]
		if p != "" && p[0] == '"' {
			_, rest, err := unquote(p)
			if err != nil && !strings.Contains(err.Detail, "empty") {
				return bad("a quoted parameter value is malformed")
			}
			if err != nil { // an empty string value: ""
				rest = p[2:]
			}
			p = rest
			continue
		}
		m := 0
		for m < len(p) && p[m] != ';' && p[m] > 0x20 && p[m] < 0x7f && p[m] != ',' && p[m] != '"' {
			m++
		}
		if m == 0 {
			return bad("a parameter value is empty")
		}
		p = p[m:]
	}
	return nil
}

// keyHeaderSpelledLike names a header of h that a client meant as the
// Idempotency-Key (X-Idempotency-Key, Idempotency_Key, IdempotencyKey), or
// is "". The name is sent back only when it is one of those spellings.
func keyHeaderSpelledLike(h http.Header) string {
	for name := range h {
		if len(name) > 32 || strings.EqualFold(name, "Idempotency-Key") {
			continue
		}
		switch strings.TrimPrefix(foldName(name), "x") {
		case "idempotencykey", "idempotentkey":
			return name
		}
	}
	return ""
}
