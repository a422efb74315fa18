package events

import "strings"

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
	// OrdersBucket maps an order ID to the order read model.
	OrdersBucket = "ORDERS"
)

// Subjects.
const (
	// CommandSubjectPrefix is followed by the order ID: orders.commands.create.<order_id>.
	CommandSubjectPrefix = "orders.commands.create."
	// CommandSubjects matches every command.
	CommandSubjects = "orders.commands.create.>"
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

// Kind is the second-to-last token of an event subject: what happened to the order.
type Kind string

const (
	// KindCreated is the subject token of OrderCreated.
	KindCreated Kind = "created"
	// KindRejected is the subject token of OrderRejected.
	KindRejected Kind = "rejected"
)

// CommandSubject is the subject a CreateOrder command for orderID is published on.
func CommandSubject(orderID string) string { return CommandSubjectPrefix + orderID }

// EventSubject is the subject of an event of kind k about orderID, for example
// orders.events.created.ord_01J9Z3N8K1W6XG2S7Q4V5T0R8M.
func EventSubject(k Kind, orderID string) string {
	return EventSubjectPrefix + string(k) + "." + orderID
}

// KindSubjects filters the events of one kind: orders.events.created.>.
func KindSubjects(k Kind) string { return EventSubjectPrefix + string(k) + ".>" }

// OrderSubjects filters every event of one order: orders.events.*.<order_id>.
func OrderSubjects(orderID string) string { return EventSubjectPrefix + "*." + orderID }

// OrderIDPrefix starts every order ID.
const OrderIDPrefix = "ord_"

// ValidOrderID reports whether id has the form of an order ID: "ord_" followed by
// 26 characters of Crockford base32 (a ULID). Such an ID is a single NATS subject
// token and a valid key-value key.
func ValidOrderID(id string) bool {
	if len(id) != len(OrderIDPrefix)+26 || !strings.HasPrefix(id, OrderIDPrefix) {
		return false
	}
	for _, c := range id[len(OrderIDPrefix):] {
		if !strings.ContainsRune(crockford, c) {
			return false
		}
	}
	return true
}

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
