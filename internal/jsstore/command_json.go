package jsstore

import (
	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsonw"
)

// encodeCommand is go-json's encoding of cmd, appended by hand when its
// values allow (jsonw): the same bytes (TestCommandMatchesGoJSON), without
// reflection, which took a quarter of the API's publish.
func encodeCommand(cmd events.CreateOrder) ([]byte, error) {
	size := 320 + len(cmd.Tenant) + len(cmd.Request.CustomerID) + len(cmd.TraceParent) + len(cmd.TraceState)
	for _, it := range cmd.Request.Items {
		size += 48 + len(it.SKU)
	}
	if b, ok := appendCommand(make([]byte, 0, size), cmd); ok {
		return b, nil
	}
	return gojson.Marshal(cmd)
}

// appendCommand appends cmd as go-json encodes events.CreateOrder; ok is
// false when a value needs what jsonw leaves to the library.
func appendCommand(b []byte, cmd events.CreateOrder) ([]byte, bool) {
	w := jsonw.New(b)
	w = w.String('{', "type", cmd.Type)
	if cmd.IDForm != "" { // omitempty
		w = w.String(',', "id_form", cmd.IDForm)
	}
	if cmd.Nonce != "" {
		w = w.String(',', "nonce", cmd.Nonce)
	}
	w = w.String(',', "tenant", cmd.Tenant)
	w = w.String(',', "key_hash", cmd.KeyHash)
	w = w.String(',', "fingerprint", cmd.Fingerprint)
	w = w.Time(',', "accepted_at", cmd.AcceptedAt)
	r := cmd.Request
	w = w.Raw(`,"request":`)
	w = w.String('{', "customer_id", r.CustomerID)
	w = w.String(',', "currency", r.Currency)
	w = w.Items(',', "items", r.Items)
	if r.Total != nil {
		w = w.Int(',', "total", *r.Total)
	}
	w = w.Raw("}")
	if cmd.TraceParent != "" {
		w = w.String(',', "traceparent", cmd.TraceParent)
	}
	if cmd.TraceState != "" {
		w = w.String(',', "tracestate", cmd.TraceState)
	}
	return w.Raw("}").Bytes()
}
