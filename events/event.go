package events

import (
	"encoding/json"
	"time"
)

// CloudEvents 1.0 attributes shared by every orderly event.
const (
	// SpecVersion is the CloudEvents version of the envelope.
	SpecVersion = "1.0"
	// Source is the CloudEvents "source" of every event orderly publishes.
	Source = "orderly"
	// ContentType is the value of the NATS Content-Type header on every event:
	// the structured JSON mode of CloudEvents.
	ContentType = "application/cloudevents+json"
	// DataContentType is the CloudEvents "datacontenttype" of every event.
	DataContentType = "application/json"
)

// Event types. The version is part of the name: a consumer that knows only v1
// ignores a v2 and keeps working.
const (
	// OrderCreatedType is the CloudEvents "type" of OrderCreated.
	OrderCreatedType = "orderly.order.created.v1"
	// OrderRejectedType is the CloudEvents "type" of OrderRejected.
	OrderRejectedType = "orderly.order.rejected.v1"
)

// Event is a CloudEvents 1.0 envelope in structured JSON mode. Data is
// OrderCreated or OrderRejected, or json.RawMessage before the type is known.
type Event[T any] struct {
	// SpecVersion is always "1.0".
	SpecVersion string `json:"specversion"`
	// ID is deterministic: "<order_id>.<kind>", for example
	// "ord_0000000000001WWZAD2XPDAXP2.created". The same value is the NATS
	// Nats-Msg-Id header. Consumers use it to drop duplicates.
	ID string `json:"id"`
	// Source is always "orderly".
	Source string `json:"source"`
	// Type is OrderCreatedType or OrderRejectedType.
	Type string `json:"type"`
	// Subject is the order ID.
	Subject string `json:"subject"`
	// Time is when the processor decided the order.
	Time time.Time `json:"time"`
	// DataContentType is always "application/json".
	DataContentType string `json:"datacontenttype"`
	// TraceParent and TraceState are the CloudEvents distributed-tracing
	// extension: the W3C trace context of the request that made the order,
	// so that a consumer can continue its trace. Optional.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Data is the event payload.
	Data T `json:"data"`
}

// EventID is the deterministic ID of the event of kind k about orderID.
func EventID(k Kind, orderID string) string { return orderID + "." + string(k) }

// NewEvent wraps data in an envelope of the given type about orderID.
func NewEvent[T any](typ string, k Kind, orderID string, at time.Time, data T) Event[T] {
	return Event[T]{
		SpecVersion:     SpecVersion,
		ID:              EventID(k, orderID),
		Source:          Source,
		Type:            typ,
		Subject:         orderID,
		Time:            at.UTC(),
		DataContentType: DataContentType,
		Data:            data,
	}
}

// RawEvent is an envelope whose data is not decoded yet.
type RawEvent = Event[json.RawMessage]

// OrderCreated says that an order was accepted and will be fulfilled. It is
// published once per order on EventSubject(KindCreated, OrderID).
type OrderCreated struct {
	// OrderID identifies the order; it is also the CloudEvents subject.
	OrderID string `json:"order_id"`
	// Tenant owns the order.
	Tenant string `json:"tenant"`
	// CustomerID is as the client sent it.
	CustomerID string `json:"customer_id"`
	// Currency is an ISO 4217 code.
	Currency string `json:"currency"`
	// Items are the order lines as the client sent them.
	Items []Item `json:"items"`
	// Total is the sum of quantity*unit_price over the items, in minor units.
	Total int64 `json:"total"`
	// IdempotencyKeyHash is the hashed tenant-scoped idempotency key of the
	// request that created the order. Consumers need not use it.
	IdempotencyKeyHash string `json:"idempotency_key_hash"`
	// RequestFingerprint is the SHA-256 of the canonical request. Consumers need
	// not use it.
	RequestFingerprint string `json:"request_fingerprint"`
	// AcceptedAt is when the API accepted the request.
	AcceptedAt time.Time `json:"accepted_at"`
	// CreatedAt is when the processor created the order (the CloudEvents time).
	CreatedAt time.Time `json:"created_at"`
}

// Rejection reasons. A consumer must accept reasons it does not know.
const (
	// ReasonTotalMismatch: the request's total is not the sum of its items.
	ReasonTotalMismatch = "total_mismatch"
	// ReasonInvalidOrder: the order breaks a rule the API did not check.
	ReasonInvalidOrder = "invalid_order"
	// ReasonDuplicate: another order already holds the request's idempotency key
	// and the request is the same; DuplicateOf names that order. Only happens when
	// a retry reached the broker after the duplicate window while the original was
	// not yet processed.
	ReasonDuplicate = "duplicate"
	// ReasonKeyReused: another order already holds the request's idempotency key
	// with a different request; DuplicateOf names that order.
	ReasonKeyReused = "idempotency_key_reused"
	// ReasonProcessingFailed: the command failed permanently and went to the
	// dead-letter stream ORDER_COMMANDS_DLQ.
	ReasonProcessingFailed = "processing_failed"
)

// OrderRejected says that an order will not be fulfilled. It is published at
// most once per order on EventSubject(KindRejected, OrderID), and never for an
// order that has an OrderCreated.
type OrderRejected struct {
	// OrderID identifies the order; it is also the CloudEvents subject.
	OrderID string `json:"order_id"`
	// Tenant owns the order.
	Tenant string `json:"tenant"`
	// Reason is a stable code: total_mismatch, invalid_order, duplicate,
	// idempotency_key_reused, processing_failed, or one added later.
	Reason string `json:"reason"`
	// Detail explains the reason to a human.
	Detail string `json:"detail"`
	// DuplicateOf is the order that holds the idempotency key, for the reasons
	// duplicate and idempotency_key_reused.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Request is the order as the client sent it.
	Request OrderRequest `json:"request"`
	// IdempotencyKeyHash is the hashed tenant-scoped idempotency key.
	IdempotencyKeyHash string `json:"idempotency_key_hash"`
	// RequestFingerprint is the SHA-256 of the canonical request.
	RequestFingerprint string `json:"request_fingerprint"`
	// AcceptedAt is when the API accepted the request.
	AcceptedAt time.Time `json:"accepted_at"`
	// RejectedAt is when the processor rejected the order (the CloudEvents time).
	RejectedAt time.Time `json:"rejected_at"`
}

// HoldsKey reports whether the rejected order is the one its idempotency key
// answers with. Duplicates of another order do not hold the key.
func (r OrderRejected) HoldsKey() bool {
	return r.Reason != ReasonDuplicate && r.Reason != ReasonKeyReused
}
