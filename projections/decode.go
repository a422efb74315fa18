package projections

import (
	"strings"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonr"
)

// decodeEvent decodes an order event of either kind: in one pass (jsonr)
// when readEvent takes it, with go-json otherwise (FuzzDecodeEvent: the
// same fields either way). The API's feed decodes every event so.
func decodeEvent(data []byte) (events.Event[anyOrderEvent], error) {
	if ev, ok := readEvent(data); ok {
		// The strings read share the event's one copy; the ones a
		// projection keeps (a cached answer) get their own.
		d := &ev.Data
		d.OrderID, d.Tenant = strings.Clone(d.OrderID), strings.Clone(d.Tenant)
		d.IdempotencyKeyHash, d.RequestFingerprint = strings.Clone(d.IdempotencyKeyHash), strings.Clone(d.RequestFingerprint)
		return ev, nil
	}
	var ev events.Event[anyOrderEvent]
	err := jsonr.Unmarshal(data, &ev)
	return ev, err
}

// readEvent reads an order event as go-json decodes it into
// events.Event[anyOrderEvent]; ok is false when it is left to go-json.
func readEvent(data []byte) (ev events.Event[anyOrderEvent], ok bool) {
	d := jsonr.New(data)
	m := d.Object()
	for name, more := d.Member(&m); more; name, more = d.Member(&m) {
		switch string(name) {
		case "specversion":
			d.Once(&m, 0)
			ev.SpecVersion = d.String()
		case "id":
			d.Once(&m, 1)
			ev.ID = d.String()
		case "source":
			d.Once(&m, 2)
			ev.Source = d.String()
		case "type":
			d.Once(&m, 3)
			ev.Type = d.String()
		case "subject":
			d.Once(&m, 4)
			ev.Subject = d.String()
		case "time":
			d.Once(&m, 5)
			ev.Time = d.Time()
		case "datacontenttype":
			d.Once(&m, 6)
			ev.DataContentType = d.String()
		case "traceparent":
			d.Once(&m, 7)
			ev.TraceParent = d.String()
		case "tracestate":
			d.Once(&m, 8)
			ev.TraceState = d.String()
		case "data":
			d.Once(&m, 9)
			readData(&d, &ev.Data)
		default:
			d.Fail()
		}
	}
	return ev, d.End()
}

func readData(d *jsonr.Decoder, e *anyOrderEvent) {
	m := d.Object()
	for name, more := d.Member(&m); more; name, more = d.Member(&m) {
		switch string(name) {
		case "order_id":
			d.Once(&m, 0)
			e.OrderID = d.String()
		case "tenant":
			d.Once(&m, 1)
			e.Tenant = d.String()
		case "customer_id":
			d.Once(&m, 2)
			e.CustomerID = d.String()
		case "currency":
			d.Once(&m, 3)
			e.Currency = d.String()
		case "items":
			d.Once(&m, 4)
			e.Items = d.Items()
		case "total":
			d.Once(&m, 5)
			e.Total = d.Int()
		case "idempotency_key_hash":
			d.Once(&m, 6)
			e.IdempotencyKeyHash = d.String()
		case "request_fingerprint":
			d.Once(&m, 7)
			e.RequestFingerprint = d.String()
		case "accepted_at":
			d.Once(&m, 8)
			e.AcceptedAt = d.Time()
		case "created_at":
			d.Once(&m, 9)
			e.CreatedAt = d.Time()
		case "reason":
			d.Once(&m, 10)
			e.Reason = d.String()
		case "detail":
			d.Once(&m, 11)
			e.Detail = d.String()
		case "duplicate_of":
			d.Once(&m, 12)
			e.DuplicateOf = d.String()
		case "request":
			d.Once(&m, 13)
			e.Request = d.Request()
		case "rejected_at":
			d.Once(&m, 14)
			e.RejectedAt = d.Time()
		default:
			d.Fail()
		}
	}
}
