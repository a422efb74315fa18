package idempotency

import (
	"net/http"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/problem"
)

// OrderPath is the path of an order's resource, the Location of its responses.
func OrderPath(orderID string) string { return "/v1/orders/" + orderID }

// Created is the stored response of a created order: 201 with the order's
// JSON representation (CreatedOrder).
func Created(e events.OrderCreated) Record {
	return Record{
		State:       StateCompleted,
		OrderID:     e.OrderID,
		Fingerprint: e.RequestFingerprint,
		Status:      http.StatusCreated,
		Location:    OrderPath(e.OrderID),
		ContentType: "application/json",
		Body:        CreatedOrder(e).Body,
	}
}

// Rejected is the stored response of a rejected order that holds its key:
// 422 order_rejected with the reason.
func Rejected(e events.OrderRejected) Record {
	p := problem.New(http.StatusUnprocessableEntity, problem.CodeRejected, "Order rejected", e.Detail)
	p.OrderID = e.OrderID
	p.Reason = e.Reason
	return Record{
		State:       StateCompleted,
		OrderID:     e.OrderID,
		Fingerprint: e.RequestFingerprint,
		Status:      http.StatusUnprocessableEntity,
		Location:    OrderPath(e.OrderID),
		ContentType: problem.ContentType,
		Body:        p.JSON(),
	}
}
