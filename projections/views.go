package projections

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/problem"
)

// OrderView is the JSON representation of an order (GET /v1/orders/{id} and the
// body of a 201). Rendering is deterministic: the same event gives the same
// bytes, so a rebuilt read model serves what the live one served.
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

// OrderPath is the path of an order's resource.
func OrderPath(orderID string) string { return "/v1/orders/" + orderID }

func mustJSON(v any) []byte {
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
	return Order{Tenant: cmd.Tenant, Status: StatusPending, Body: mustJSON(OrderView{
		ID:         orderID,
		Status:     StatusPending,
		CustomerID: cmd.Request.CustomerID,
		Currency:   cmd.Request.Currency,
		Items:      cmd.Request.Items,
		Total:      sumOrNil(cmd.Request),
		AcceptedAt: cmd.AcceptedAt.UTC(),
	})}
}

// CreatedOrder renders a created order.
func CreatedOrder(e events.OrderCreated) Order {
	created := e.CreatedAt.UTC()
	total := e.Total
	return Order{Tenant: e.Tenant, Status: StatusCreated, Body: mustJSON(OrderView{
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

// CreatedResult is the stored response of a created order: 201 with the order.
func CreatedResult(e events.OrderCreated, body []byte) Result {
	return Result{
		State:       StateCompleted,
		OrderID:     e.OrderID,
		Fingerprint: e.RequestFingerprint,
		Status:      http.StatusCreated,
		Location:    OrderPath(e.OrderID),
		ContentType: "application/json",
		Body:        body,
	}
}

// RejectedOrder renders a rejected order.
func RejectedOrder(e events.OrderRejected) Order {
	rejected := e.RejectedAt.UTC()
	return Order{Tenant: e.Tenant, Status: StatusRejected, Body: mustJSON(OrderView{
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

// RejectedResult is the stored response of a rejected order: 422 order_rejected.
func RejectedResult(e events.OrderRejected) Result {
	p := problem.New(http.StatusUnprocessableEntity, problem.CodeRejected, "Order rejected", e.Detail)
	p.OrderID = e.OrderID
	p.Reason = e.Reason
	return Result{
		State:       StateCompleted,
		OrderID:     e.OrderID,
		Fingerprint: e.RequestFingerprint,
		Status:      http.StatusUnprocessableEntity,
		Location:    OrderPath(e.OrderID),
		ContentType: problem.ContentType,
		Body:        p.JSON(),
	}
}
