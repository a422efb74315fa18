package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"

	"github.com/orderly-dev/orderly/events"
)

// KeyHashLen is the length of a key hash: 43 characters of base64url.
const KeyHashLen = 43

// KeyHash is the hashed tenant-scoped key: base64url (no padding) of
// SHA-256(tenant, 0x00, key). It is the Nats-Msg-Id of the command and the key
// in ORDER_RESULTS, whatever characters the client's key holds, and a valid
// NATS subject token.
func KeyHash(tenant, key string) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// ValidKeyHash reports whether s has the form of a KeyHash: 43 characters of
// the base64url alphabet. Anything that becomes part of a subject is checked
// with it first.
func ValidKeyHash(s string) bool { return len(s) == KeyHashLen && events.IsBase64URL(s) }

// Fingerprint is the base64url SHA-256 of the canonical form of req: its
// encoding/json encoding, whose field order and spacing are fixed. Two bodies
// that differ only in key order or white space have the same fingerprint.
func Fingerprint(req events.OrderRequest) string {
	b, err := json.Marshal(req)
	if err != nil { // plain data: cannot happen
		panic(err)
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
