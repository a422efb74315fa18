package idempotency

import (
	"encoding/json"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonw"
)

// OrderStatus is the status of an order as GET /v1/orders/{id} shows it.
type OrderStatus string

const (
	// StatusPending: accepted, not decided yet.
	StatusPending OrderStatus = "pending"
	// StatusCreated: the order was created.
	StatusCreated OrderStatus = "created"
	// StatusRejected: the order was rejected.
	StatusRejected OrderStatus = "rejected"
)

// Order is an order as GET /v1/orders/{id} serves it: who owns it, its
// status, and its JSON representation, which is also the body of the stored
// 201. It is rendered from the order's event (or its command while pending),
// not stored.
type Order struct {
	// Tenant owns the order; other tenants do not see it.
	Tenant string
	// Status is pending, created or rejected.
	Status OrderStatus
	// Body is the JSON representation of the order.
	Body []byte
	// AcceptedAt is when a pending order was accepted (zero for the others):
	// how long its decision may still take follows from it.
	AcceptedAt time.Time
}

// OrderView is the JSON representation of an order (GET /v1/orders/{id} and the
// body of a 201). Rendering is deterministic: the same event gives the same
// bytes, so a replay, a GET and a rebuilt read model serve the same bytes.
type OrderView struct {
	ID         string        `json:"id"`
	Status     OrderStatus   `json:"status"`
	CustomerID string        `json:"customer_id"`
	Currency   string        `json:"currency"`
	Items      []events.Item `json:"items"`
	// Total is the sum of the items in minor units; absent when it cannot be
	// computed (an order rejected for its amounts).
	Total      *int64     `json:"total,omitempty"`
	AcceptedAt time.Time  `json:"accepted_at"`
	CreatedAt  *time.Time `json:"created_at,omitempty"`
	RejectedAt *time.Time `json:"rejected_at,omitempty"`
	Rejection  *Rejection `json:"rejection,omitempty"`
}

// Rejection says why an order was rejected.
type Rejection struct {
	Reason      string `json:"reason"`
	Detail      string `json:"detail"`
	DuplicateOf string `json:"duplicate_of,omitempty"`
}

// render encodes with encoding/json, like the fingerprint: stored responses
// are compared and replayed byte for byte (rebuilds included), so their
// encoder is the standard library's, whose output does not change with a
// faster library's version.
func render(v OrderView) []byte {
	b, err := json.Marshal(v)
	if err != nil { // plain data: cannot happen
		panic(err)
	}
	return b
}

func sumOrNil(r events.OrderRequest) *int64 {
	if s, err := r.Sum(); err == nil {
		return &s
	}
	return nil
}

// PendingOrder renders an accepted order that is not decided yet.
func PendingOrder(cmd events.CreateOrder, orderID string) Order {
	return Order{Tenant: cmd.Tenant, Status: StatusPending, Body: render(OrderView{
		ID:         orderID,
		Status:     StatusPending,
		CustomerID: cmd.Request.CustomerID,
		Currency:   cmd.Request.Currency,
		Items:      cmd.Request.Items,
		Total:      sumOrNil(cmd.Request),
		AcceptedAt: cmd.AcceptedAt.UTC(),
	}), AcceptedAt: cmd.AcceptedAt}
}

// CreatedOrder renders a created order.
func CreatedOrder(e events.OrderCreated) Order {
	size := 256 + len(e.CustomerID) // the rest is fixed or near
	for _, it := range e.Items {
		size += 48 + len(it.SKU)
	}
	if b, ok := appendCreatedView(make([]byte, 0, size), e); ok {
		return Order{Tenant: e.Tenant, Status: StatusCreated, Body: b}
	}
	created := e.CreatedAt.UTC()
	total := e.Total
	return Order{Tenant: e.Tenant, Status: StatusCreated, Body: render(OrderView{
		ID:         e.OrderID,
		Status:     StatusCreated,
		CustomerID: e.CustomerID,
		Currency:   e.Currency,
		Items:      e.Items,
		Total:      &total,
		AcceptedAt: e.AcceptedAt.UTC(),
		CreatedAt:  &created,
	})}
}

// appendCreatedView appends what render makes of a created order's view,
// byte for byte (TestCreatedViewMatchesEncodingJSON); ok is false when a
// value needs encoding/json (jsonw).
func appendCreatedView(b []byte, e events.OrderCreated) ([]byte, bool) {
	w := jsonw.New(b)
	w = w.String('{', "id", e.OrderID)
	w = w.Raw(`,"status":"created"`)
	w = w.String(',', "customer_id", e.CustomerID)
	w = w.String(',', "currency", e.Currency)
	w = w.Items(',', "items", e.Items)
	w = w.Int(',', "total", e.Total)
	w = w.Time(',', "accepted_at", e.AcceptedAt.UTC())
	w = w.Time(',', "created_at", e.CreatedAt.UTC())
	w = w.Raw("}")
	return w.Bytes()
}

// RejectedOrder renders a rejected order.
func RejectedOrder(e events.OrderRejected) Order {
	rejected := e.RejectedAt.UTC()
	return Order{Tenant: e.Tenant, Status: StatusRejected, Body: render(OrderView{
		ID:         e.OrderID,
		Status:     StatusRejected,
		CustomerID: e.Request.CustomerID,
		Currency:   e.Request.Currency,
		Items:      e.Request.Items,
		Total:      sumOrNil(e.Request),
		AcceptedAt: e.AcceptedAt.UTC(),
		RejectedAt: &rejected,
		Rejection:  &Rejection{Reason: e.Reason, Detail: e.Detail, DuplicateOf: e.DuplicateOf},
	})}
}
