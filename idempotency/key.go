package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonw"
)

// KeyHashLen is the length of a key hash: 43 characters of base64url.
const KeyHashLen = 43

// KeyHash is the hashed tenant-scoped key: base64url (no padding) of
// SHA-256(tenant, 0x00, key). It is the Nats-Msg-Id of the command and the key
// in ORDER_RESULTS, whatever characters the client's key holds, and a valid
// NATS subject token.
func KeyHash(tenant, key string) string {
	var buf [256]byte
	b := append(append(append(buf[:0], tenant...), 0), key...)
	sum := sha256.Sum256(b)
	var out [KeyHashLen]byte
	base64.RawURLEncoding.Encode(out[:], sum[:])
	return string(out[:])
}

// ValidKeyHash reports whether s has the form of a KeyHash: 43 characters of
// the base64url alphabet. Anything that becomes part of a subject is checked
// with it first.
func ValidKeyHash(s string) bool { return len(s) == KeyHashLen && events.IsBase64URL(s) }

// Fingerprint is the base64url SHA-256 of the canonical form of req: its
// encoding/json encoding, whose field order and spacing are fixed. Two bodies
// that differ only in key order or white space have the same fingerprint.
// The form is appended by hand (appendCanonical), byte for byte what
// encoding/json writes, which it falls back to for any string that
// encoding/json would escape (TestFingerprintMatchesEncodingJSON).
func Fingerprint(req events.OrderRequest) string {
	var buf [1024]byte // an order of up to about ten lines is hashed without allocating
	b, ok := appendCanonical(buf[:0], req)
	if !ok {
		var err error
		if b, err = json.Marshal(req); err != nil { // plain data: cannot happen
			panic(err)
		}
	}
	sum := sha256.Sum256(b)
	var out [KeyHashLen]byte
	base64.RawURLEncoding.Encode(out[:], sum[:])
	return string(out[:])
}

// appendCanonical appends req as encoding/json.Marshal encodes it; ok is
// false when a string holds a byte that encoding/json escapes or replaces.
func appendCanonical(b []byte, req events.OrderRequest) ([]byte, bool) {
	w := jsonw.New(b)
	w = w.String('{', "customer_id", req.CustomerID)
	w = w.String(',', "currency", req.Currency)
	w = w.Items(',', "items", req.Items)
	if req.Total != nil {
		w = w.Int(',', "total", *req.Total)
	}
	w = w.Raw("}")
	return w.Bytes()
}
