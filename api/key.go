package api

import (
	"fmt"
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
// bare forms are the same key. A bare key must not start with a quote or hold a
// comma: a comma is how HTTP joins repeated fields, so it would be ambiguous.
// No field, or an empty one, is idempotency_key_missing; two fields or any
// other defect is idempotency_key_invalid.
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
	key := v
	if v[0] == '"' {
		var err *KeyError
		if key, err = unquote(v); err != nil {
			return "", err
		}
	} else if strings.IndexByte(v, ',') >= 0 {
		return "", keyInvalid("a bare idempotency key must not contain a comma (two Idempotency-Key fields?); quote it")
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

// unquote parses a Structured Field string (RFC 9651 section 3.3.3) that must
// make up the whole value.
func unquote(v string) (string, *KeyError) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", keyInvalid(`in a quoted idempotency key a backslash may only escape " or \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", keyInvalid("unexpected characters after the closing quote of the idempotency key")
			}
			if b.Len() == 0 {
				return "", &KeyError{Code: problem.CodeKeyMissing, Detail: "the Idempotency-Key header is empty"}
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", keyInvalid("the idempotency key may hold only visible ASCII characters; found byte 0x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", keyInvalid("the quoted idempotency key has no closing quote")
}
