package processor

import (
	"fmt"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
)

// Decide is the business decision on the command of order orderID, which holds
// its key: OrderCreated, or OrderRejected when the order breaks a rule. It
// returns the event kind and the encoded event. It is a pure function.
func Decide(cmd events.CreateOrder, orderID string, now time.Time) (events.Kind, []byte) {
	r := cmd.Request
	sum, err := r.Sum()
	switch {
	case err != nil:
		return reject(cmd, orderID, now, events.ReasonInvalidOrder, "", err.Error())
	case len(r.Items) == 0:
		return reject(cmd, orderID, now, events.ReasonInvalidOrder, "", "the order has no items")
	case r.Total != nil && *r.Total != sum:
		return reject(cmd, orderID, now, events.ReasonTotalMismatch, "",
			fmt.Sprintf("total %d does not equal the sum of quantity*unit_price over the items, %d", *r.Total, sum))
	}
	e := events.NewEvent(events.OrderCreatedType, events.KindCreated, orderID, now, events.OrderCreated{
		OrderID:            orderID,
		Tenant:             cmd.Tenant,
		CustomerID:         r.CustomerID,
		Currency:           r.Currency,
		Items:              r.Items,
		Total:              sum,
		IdempotencyKeyHash: cmd.KeyHash,
		RequestFingerprint: cmd.Fingerprint,
		AcceptedAt:         cmd.AcceptedAt.UTC(),
		CreatedAt:          now.UTC(),
	})
	e.TraceParent, e.TraceState = cmd.TraceParent, cmd.TraceState
	return events.KindCreated, encode(e)
}

func reject(cmd events.CreateOrder, orderID string, now time.Time, reason, duplicateOf, detail string) (events.Kind, []byte) {
	e := events.NewEvent(events.OrderRejectedType, events.KindRejected, orderID, now, events.OrderRejected{
		OrderID:            orderID,
		Tenant:             cmd.Tenant,
		Reason:             reason,
		Detail:             detail,
		DuplicateOf:        duplicateOf,
		Request:            cmd.Request,
		IdempotencyKeyHash: cmd.KeyHash,
		RequestFingerprint: cmd.Fingerprint,
		AcceptedAt:         cmd.AcceptedAt.UTC(),
		RejectedAt:         now.UTC(),
	})
	e.TraceParent, e.TraceState = cmd.TraceParent, cmd.TraceState
	return events.KindRejected, encode(e)
}

func encode(v any) []byte {
	b, err := gojson.Marshal(v)
	if err != nil { // plain data: cannot happen
		panic(err)
	}
	return b
}
