package events

import (
	"errors"
	"math"
	"math/bits"
	"time"
)

// Item is one line of an order.
type Item struct {
	// SKU identifies the product.
	SKU string `json:"sku"`
	// Quantity is the number of units, at least 1.
	Quantity int64 `json:"quantity"`
	// UnitPrice is the price of one unit in minor units of the order's currency
	// (cents for EUR), at least 0.
	UnitPrice int64 `json:"unit_price"`
}

// OrderRequest is the order as the client asked for it, after decoding. Its JSON
// encoding (encoding/json, fields in this order) is the canonical form that the
// request fingerprint is computed over.
type OrderRequest struct {
	// CustomerID identifies the customer.
	CustomerID string `json:"customer_id"`
	// Currency is an ISO 4217 code such as "EUR".
	Currency string `json:"currency"`
	// Items lists the order lines, at least one.
	Items []Item `json:"items"`
	// Total is the total the client expects, in minor units; nil when the client
	// did not send one.
	Total *int64 `json:"total,omitempty"`
}

// ErrInvalidAmount is returned by Sum when an amount is negative or the total
// does not fit in an int64.
var ErrInvalidAmount = errors.New("order amount is negative or overflows a 64-bit integer")

// Sum is the total of quantity*unit_price over the items, or ErrInvalidAmount.
func (r OrderRequest) Sum() (int64, error) {
	var sum int64
	for _, it := range r.Items {
		if it.Quantity < 0 || it.UnitPrice < 0 {
			return 0, ErrInvalidAmount
		}
		hi, lo := bits.Mul64(uint64(it.Quantity), uint64(it.UnitPrice))
		if hi != 0 || lo > math.MaxInt64 || sum > math.MaxInt64-int64(lo) {
			return 0, ErrInvalidAmount
		}
		sum += int64(lo)
	}
	return sum, nil
}

// CreateOrderType is the type of the CreateOrder command, version 1.
const CreateOrderType = "orderly.command.create_order.v1"

// CreateOrder is the command the API publishes on CommandSubject, with the
// hashed idempotency key as Nats-Msg-Id. It is internal to orderly, but
// documented here because the dead-letter stream holds it. Its order's ID is
// OrderID(its stream sequence, Nonce), or with IDForm keyed
// KeyedOrderID(its stream sequence, the key's token): see OrderIDAt.
type CreateOrder struct {
	// Type is CreateOrderType.
	Type string `json:"type"`
	// IDForm is empty, or IDFormKeyed: the API chose a keyed order ID for the
	// command's order (ADR 0010), and Nonce is empty.
	IDForm string `json:"id_form,omitempty"`
	// Nonce is random (NonceLen characters of Crockford base32); with the
	// command's stream sequence it makes the order ID. Empty with IDFormKeyed.
	Nonce string `json:"nonce,omitempty"`
	// Tenant owns the order; idempotency keys are scoped by tenant.
	Tenant string `json:"tenant"`
	// KeyHash is the hashed tenant-scoped idempotency key (base64url SHA-256).
	KeyHash string `json:"key_hash"`
	// Fingerprint is the base64url SHA-256 of the canonical request.
	Fingerprint string `json:"fingerprint"`
	// AcceptedAt is when the API accepted the request.
	AcceptedAt time.Time `json:"accepted_at"`
	// Request is the decoded order.
	Request OrderRequest `json:"request"`
	// TraceParent and TraceState are the W3C trace context of the request
	// (also in the message's headers); the events of the order carry them on.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}
