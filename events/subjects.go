package events

import (
	"crypto/rand"
	"strings"
)

// Streams and key-value buckets. A stream or bucket name is part of the contract:
// consumers bind to ORDER_EVENTS by name.
const (
	// CommandStream holds CreateOrder commands. Retention is by age (Limits), never
	// WorkQueue: an acked command must stay stored so that its Nats-Msg-Id keeps
	// counting for the whole duplicate window, also across a server restart.
	CommandStream = "ORDER_COMMANDS"
	// EventStream holds the order events: the source of truth from which every
	// read model is built.
	EventStream = "ORDER_EVENTS"
	// DeadLetterStream holds commands that failed permanently, with the reason.
	DeadLetterStream = "ORDER_COMMANDS_DLQ"
	// ResultsBucket maps a hashed, tenant-scoped idempotency key to its claim and,
	// once the order is decided, to the stored HTTP response.
	ResultsBucket = "ORDER_RESULTS"
)

// Subjects.
const (
	// CommandSubject is the one subject of every CreateOrder command. (One
	// subject, not one per order: a subject per order would cost the server
	// memory for each, and an order ID already leads to its command, see OrderID.)
	CommandSubject = "orders.commands.create"
	// ReplaySubject is where `orderly dlq replay` publishes a dead-lettered
	// command again, with HeaderReplayOf naming the sequence its order ID was
	// made of. Only the operator may publish here (internal/natsauth).
	ReplaySubject = "orders.commands.replay"
	// CommandSubjects matches every command: the command stream's subjects and
	// the processors' filter.
	CommandSubjects = "orders.commands.>"
	// DeadLetterSubject is where dead-lettered commands go, with the header
	// reason_poisoned saying why.
	DeadLetterSubject = "orders.dlq.create"
	// DeadLetterSubjects matches every dead-lettered command.
	DeadLetterSubjects = "orders.dlq.>"
	// EventSubjectPrefix starts every event subject: orders.events.<kind>.<order_id>.
	EventSubjectPrefix = "orders.events."
	// EventSubjects matches every event.
	EventSubjects = "orders.events.>"
)

// HeaderReplayOf, on a command of ReplaySubject, is the ORDER_COMMANDS
// sequence of the original command: the order keeps the ID it was given.
const HeaderReplayOf = "Orderly-Replay-Of"

// HeaderDecidedBelow, on an event, is an ORDER_COMMANDS sequence below
// which the processors had handled every command (decided it, found its key
// held, or dead-lettered it) when the event was stored: their consumer's
// acknowledgement floor plus one, read at most about a second before. orderly
// setup starts a processor consumer it makes again there, instead of
// delivering every retained command again. Absent: not known (an event of
// a version before it, or stored before the first reading).
const HeaderDecidedBelow = "Orderly-Commands-Decided-Below"

// Kind is the second-to-last token of an event subject: what happened to the order.
type Kind string

const (
	// KindCreated is the subject token of OrderCreated.
	KindCreated Kind = "created"
	// KindRejected is the subject token of OrderRejected.
	KindRejected Kind = "rejected"
)

// EventSubject is the subject of an event of kind k about orderID, for example
// orders.events.created.ord_0000000000001WWZAD2XPDAXP2; for a keyed order ID
// (ADR 0010) it is the keyed subject, orders.events.<kind>.<key>.<seq> (see
// KeyedEventSubject).
func EventSubject(k Kind, orderID string) string {
	if seq, token, keyed := ParseKeyedOrderID(orderID); keyed {
		return KeyedEventSubject(k, token, seq)
	}
	return EventSubjectPrefix + string(k) + "." + orderID
}

// KindSubjects filters the events of one kind: orders.events.created.>.
func KindSubjects(k Kind) string { return EventSubjectPrefix + string(k) + ".>" }

// OrderSubjects filters every event of one order: orders.events.*.<order_id>.
func OrderSubjects(orderID string) string { return EventSubjectPrefix + "*." + orderID }

// OrderIDPrefix starts every order ID.
const OrderIDPrefix = "ord_"

// An order ID is "ord_", the stream sequence of the order's command in
// ORDER_COMMANDS (13 characters of Crockford base32, so IDs sort by arrival),
// and the command's nonce (13 random characters): 30 characters in all, for
// example ord_0000000000001WWZAD2XPDAXP2. The sequence makes the command of a
// pending order one direct read away; the nonce makes IDs unguessable and
// unique even across a recreated stream. An ID is a single NATS subject token
// and a valid key-value key.
const (
	seqLen   = 13
	NonceLen = 13
)

// OrderID is the ID of the order whose command is stored at seq with nonce.
func OrderID(seq uint64, nonce string) string {
	b := make([]byte, 0, len(OrderIDPrefix)+seqLen+len(nonce))
	b = append(b, OrderIDPrefix...)
	return string(append(appendSeq(b, seq), nonce...))
}

// appendSeq appends seq as the seqLen characters of Crockford base32 that
// order IDs and keyed event subjects carry: fixed width, so they sort by
// sequence.
func appendSeq(b []byte, seq uint64) []byte {
	for i := seqLen - 1; i >= 0; i-- {
		b = append(b, crockford[(seq>>(5*uint(i)))&31])
	}
	return b
}

// seqToken is seq as a token of its own (see appendSeq).
func seqToken(seq uint64) string { return string(appendSeq(make([]byte, 0, seqLen), seq)) }

// ParseOrderID splits an order ID into its command's stream sequence and nonce.
func ParseOrderID(id string) (seq uint64, nonce string, ok bool) {
	if len(id) != len(OrderIDPrefix)+seqLen+NonceLen || !strings.HasPrefix(id, OrderIDPrefix) {
		return 0, "", false
	}
	body := id[len(OrderIDPrefix):]
	seq, ok = parseSeq(body[:seqLen])
	if !ok {
		return 0, "", false
	}
	nonce = body[seqLen:]
	if !ValidNonce(nonce) {
		return 0, "", false
	}
	return seq, nonce, true
}

// parseSeq decodes the seqLen characters of a sequence in an order ID. A
// stream's sequences start at 1: 0 names no command (and a read of it is
// not a read of nothing but a malformed request to the server).
func parseSeq(s string) (seq uint64, ok bool) {
	for i := 0; i < seqLen; i++ {
		v := strings.IndexByte(crockford, s[i])
		if v < 0 || (i == 0 && v > 15) { // 13 characters hold 65 bits; the first holds 4
			return 0, false
		}
		seq = seq<<5 | uint64(v)
	}
	return seq, seq != 0
}

// ValidOrderID reports whether id has the form of an order ID: with a nonce
// (ParseOrderID) or keyed (ParseKeyedOrderID).
func ValidOrderID(id string) bool {
	_, ok := OrderSeq(id)
	return ok
}

// OrderSeq is the sequence of the command of the order id, in either form of
// order ID; ok is false when id is neither.
func OrderSeq(id string) (seq uint64, ok bool) {
	if seq, _, ok = ParseOrderID(id); ok {
		return seq, true
	}
	seq, _, ok = ParseKeyedOrderID(id)
	return seq, ok
}

// NewNonce returns a fresh command nonce: NonceLen random characters of
// Crockford base32 (65 random bits).
func NewNonce() string {
	var raw [NonceLen]byte
	if _, err := rand.Read(raw[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	for i := range raw {
		raw[i] = crockford[raw[i]&31]
	}
	return string(raw[:])
}

// ValidNonce reports whether n is NonceLen characters of Crockford base32.
func ValidNonce(n string) bool {
	if len(n) != NonceLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		if strings.IndexByte(crockford, n[i]) < 0 {
			return false
		}
	}
	return true
}

// Crockford is the alphabet of order IDs: Crockford base32, upper case.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
