package events

import "strings"

// The keyed form of event subjects and order IDs (ADR 0010): the form of a
// deployment this version creates, where an order's event is its key's
// claim. Deployments created before keep the nonce form of OrderID until
// their operator switches; EventSubject and OrderFilter take either form.
//
// A keyed event subject carries a token of the order's hashed idempotency key
// before the order's command sequence, orders.events.<kind>.<key>.<seq>, so
// that "the key's events" is a filter with a literal key token
// (orders.events.*.<key>.*), which the server resolves as a prefix look-up:
// the key's claim is the event's publish with an expected last sequence on
// that filter. A keyed order ID carries the same two parts,
// ord_<seq><key>, so that an ID leads to its subject without a read.

// KeyTokenLen is the length of a key token: the first 20 characters (120
// bits) of a hashed key (base64url of SHA-256, see idempotency.KeyHash).
const KeyTokenLen = 20

// KeyToken is the token of hashed key keyHash in keyed subjects and IDs; ok
// is false when keyHash is too short or not base64url.
func KeyToken(keyHash string) (token string, ok bool) {
	if len(keyHash) < KeyTokenLen {
		return "", false
	}
	token = keyHash[:KeyTokenLen]
	return token, validKeyToken(token)
}

func validKeyToken(t string) bool { return len(t) == KeyTokenLen && IsBase64URL(t) }

// IsBase64URL reports whether s is made of the base64url alphabet only
// (letters, digits, '-' and '_'), which is safe in a NATS subject token.
func IsBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		if !base64URL[s[i]] {
			return false
		}
	}
	return true
}

// base64URL holds the bytes of the base64url alphabet: one table load a
// byte, since every request checks its key's hash and every event its ID.
var base64URL = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	return t
}()

// KeyedOrderID is the keyed ID of the order whose command is stored at seq,
// with key token token: ord_, 13 characters of the sequence (as in OrderID,
// so that IDs sort by arrival), then the token; 37 characters.
func KeyedOrderID(seq uint64, token string) string {
	return OrderID(seq, token) // the same layout, the token in the nonce's place
}

// ParseKeyedOrderID splits a keyed order ID into its command's sequence and
// its key token.
func ParseKeyedOrderID(id string) (seq uint64, token string, ok bool) {
	if len(id) != len(OrderIDPrefix)+seqLen+KeyTokenLen || !strings.HasPrefix(id, OrderIDPrefix) {
		return 0, "", false
	}
	seq, ok = parseSeq(id[len(OrderIDPrefix) : len(OrderIDPrefix)+seqLen])
	token = id[len(OrderIDPrefix)+seqLen:]
	if !ok || !validKeyToken(token) {
		return 0, "", false
	}
	return seq, token, true
}

// KeyedEventSubject is the keyed subject of the event of kind k about the
// order whose command is stored at seq, with key token token:
// orders.events.<kind>.<token>.<seq>.
func KeyedEventSubject(k Kind, token string, seq uint64) string {
	return EventSubjectPrefix + string(k) + "." + token + "." + seqToken(seq)
}

// KeySubjects filters every keyed event of one key, of any kind and order:
// orders.events.*.<token>.*. It is the subject filter of the key's claim.
func KeySubjects(token string) string {
	return EventSubjectPrefix + "*." + token + ".*"
}

// OrderFilter is the subject filter of the events of order id, in either form
// of order ID: orders.events.*.<id>, or orders.events.*.<token>.<seq> for a
// keyed ID; ok is false when id is neither (it must not become a subject).
func OrderFilter(id string) (filter string, ok bool) {
	if seq, token, keyed := ParseKeyedOrderID(id); keyed {
		return EventSubjectPrefix + "*." + token + "." + seqToken(seq), true
	}
	if ValidOrderID(id) {
		return OrderSubjects(id), true
	}
	return "", false
}

// OrderIDOfSubject is the order ID an event subject is about: its last token,
// or, for a keyed subject (orders.events.<kind>.<token>.<seq>), the keyed ID.
func OrderIDOfSubject(subj string) string {
	last := strings.LastIndexByte(subj, '.')
	rest := subj[:last]
	if strings.Count(rest, ".") == strings.Count(EventSubjectPrefix, ".")+1 { // ...<kind>.<token>
		return OrderIDPrefix + subj[last+1:] + rest[strings.LastIndexByte(rest, '.')+1:]
	}
	return subj[last+1:]
}

// IDFormKeyed in CreateOrder.IDForm says that the command's order takes a
// keyed ID. The API writes such commands only when told to (serve
// --order-ids keyed); a processor of a version before keyed IDs refuses them
// (their nonce is empty), so processors are upgraded first.
const IDFormKeyed = "keyed"

// Keyed reports whether the command's order takes a keyed ID.
func (c CreateOrder) Keyed() bool { return c.IDForm == IDFormKeyed }

// OrderIDAt is the ID of the order of the command stored at seq: keyed (from
// seq and its key's token) or with its nonce, as the command says. ok is false
// when the command cannot make an ID of the form it names: an unknown form, a
// keyed command with a nonce or a key hash without a token, or an invalid
// nonce.
func (c CreateOrder) OrderIDAt(seq uint64) (id string, ok bool) {
	switch c.IDForm {
	case IDFormKeyed:
		token, valid := KeyToken(c.KeyHash)
		if !valid || c.Nonce != "" {
			return "", false
		}
		return KeyedOrderID(seq, token), true
	case "":
		if !ValidNonce(c.Nonce) {
			return "", false
		}
		return OrderID(seq, c.Nonce), true
	}
	return "", false
}

// HasOrderID reports whether id is the ID of the order of the command, stored
// at the sequence id names.
func (c CreateOrder) HasOrderID(id string) bool {
	seq, ok := OrderSeq(id)
	if !ok {
		return false
	}
	own, ok := c.OrderIDAt(seq)
	return ok && own == id
}

// KeyedEventSubjects filters every keyed event, of any key, kind and order:
// orders.events.*.*.* (an event subject of the nonce form has one token
// less).
const KeyedEventSubjects = EventSubjectPrefix + "*.*.*"

// KeyTokenOfSubject is the key token of a keyed event subject; ok is false
// for any other subject.
func KeyTokenOfSubject(subj string) (token string, ok bool) {
	rest, found := strings.CutPrefix(subj, EventSubjectPrefix)
	if !found {
		return "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || !validKeyToken(parts[1]) {
		return "", false
	}
	return parts[1], true
}
