package events_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/processor"
)

func compile(t *testing.T, eventType string) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	b, err := events.Schemas.ReadFile(events.SchemaFile(eventType))
	if err != nil {
		t.Fatalf("no schema for %s: %v", eventType, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(eventType+".json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(eventType + ".json")
	if err != nil {
		t.Fatalf("schema %s: %v", eventType, err)
	}
	return sch, doc.(map[string]any)
}

// undeclared lists the fields of v that the schema object does not declare, so
// that a field added to an event without documenting it fails the test.
func undeclared(path string, v any, schema map[string]any, root map[string]any) []string {
	if ref, ok := schema["$ref"].(string); ok {
		var name string
		fmt.Sscanf(ref, "#/$defs/%s", &name)
		schema = root["$defs"].(map[string]any)[name].(map[string]any)
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for k, fv := range v {
			ps, ok := props[k].(map[string]any)
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, undeclared(path+"."+k, fv, ps, root)...)
		}
	case []any:
		if items, ok := schema["items"].(map[string]any); ok {
			for i, e := range v {
				out = append(out, undeclared(fmt.Sprintf("%s[%d]", path, i), e, items, root)...)
			}
		}
	}
	sort.Strings(out)
	return out
}

func check(t *testing.T, raw []byte) {
	t.Helper()
	var ev events.RawEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	sch, doc := compile(t, ev.Type)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("%s does not match its schema: %v\n%s", ev.Type, err, raw)
	}
	if extra := undeclared("", v, doc, doc); len(extra) > 0 {
		t.Fatalf("%s has fields its schema does not declare: %v", ev.Type, extra)
	}
}

// TestSchemasMatchProducedEvents checks the events a running orderly stored
// against the published schemas.
func TestSchemasMatchProducedEvents(t *testing.T) {
	t.Parallel()
	for _, form := range []string{jsstore.OrderIDsNonce, jsstore.OrderIDsKeyed} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			cfg := orderlytest.Config(t)
			cfg.OrderIDs = form
			schemasMatchProducedEvents(t, orderlytest.Start(t, cfg))
		})
	}
}

func schemasMatchProducedEvents(t *testing.T, inst *orderlytest.Instance) {
	created := inst.PostOrder(t, "schema-1", orderlytest.Order("c-1"))
	rejected := inst.PostOrder(t, "schema-2", []byte(`{"customer_id":"c","currency":"EUR","items":[{"sku":"x","quantity":1,"unit_price":1}],"total":7}`))
	if created.Status != http.StatusCreated || rejected.Status != http.StatusUnprocessableEntity {
		t.Fatalf("setup: %d %d", created.Status, rejected.Status)
	}
	stored := map[string]bool{}
	for _, loc := range []string{created.Header.Get("Location"), rejected.Header.Get("Location")} {
		r := orderlytest.Do(t, http.MethodGet, inst.URL+loc+"/events", nil)
		var list []json.RawMessage
		if err := json.Unmarshal(r.Body, &list); err != nil || len(list) != 1 {
			t.Fatalf("events of %s: %s", loc, r.Body)
		}
		check(t, list[0])
		var ev events.RawEvent
		_ = json.Unmarshal(list[0], &ev)
		stored[ev.Type] = true
	}
	if !stored[events.OrderCreatedType] || !stored[events.OrderRejectedType] {
		t.Fatalf("checked %v, want both types", stored)
	}
}

// TestSchemasMatchEveryDecision checks the events of every decision the
// processor makes (the rarer rejections included) against the schemas.
func TestSchemasMatchEveryDecision(t *testing.T) {
	t.Parallel()
	total, wrong := int64(20), int64(21)
	base := events.CreateOrder{
		Type: events.CreateOrderType, Nonce: "N0NCE0000000A", Tenant: "t", KeyHash: "k", Fingerprint: "f",
		AcceptedAt: time.Now(), Request: events.OrderRequest{CustomerID: "c", Currency: "EUR",
			Items: []events.Item{{SKU: "a", Quantity: 2, UnitPrice: 10}}},
	}
	for name, mutate := range map[string]func(*events.CreateOrder){
		"created":        func(c *events.CreateOrder) { c.Request.Total = &total },
		"total mismatch": func(c *events.CreateOrder) { c.Request.Total = &wrong },
		"no items":       func(c *events.CreateOrder) { c.Request.Items = nil },
	} {
		cmd := base
		mutate(&cmd)
		nonce := processor.Decide(cmd, events.OrderID(42, cmd.Nonce), time.Now()).Event
		t.Run(name, func(t *testing.T) { check(t, nonce) })
		token, _ := events.KeyToken(idempotency.KeyHash("t", "k"))
		keyed := processor.Decide(cmd, events.KeyedOrderID(42, token), time.Now()).Event
		t.Run(name+" keyed", func(t *testing.T) { check(t, keyed) })
	}
}

// TestDocumentedEventExamplesMatchTheirSchemas: every JSON example in
// docs/events.md is an event its schema accepts, in the keyed form new
// deployments make: its order ID carries its idempotency key's token, and its
// id and subject name that order.
func TestDocumentedEventExamplesMatchTheirSchemas(t *testing.T) {
	doc, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := 0
	for _, block := range strings.Split(string(doc), "```json\n")[1:] {
		raw, _, ok := strings.Cut(block, "\n```")
		if !ok {
			t.Fatal("a json block of docs/events.md does not end")
		}
		examples++
		check(t, []byte(raw))
		var ev struct {
			ID, Subject, Type string
			Data              struct {
				OrderID string `json:"order_id"`
				KeyHash string `json:"idempotency_key_hash"`
			}
		}
		if err := json.Unmarshal([]byte(raw), &ev); err != nil {
			t.Fatal(err)
		}
		_, token, keyed := events.ParseKeyedOrderID(ev.Subject)
		want, _ := events.KeyToken(ev.Data.KeyHash)
		if !keyed || token != want || ev.Data.OrderID != ev.Subject || !strings.HasPrefix(ev.ID, ev.Subject+".") {
			t.Errorf("example %d (%s): id %q, subject %q, order_id %q: want one keyed order ID, of key hash %q, throughout", examples, ev.Type, ev.ID, ev.Subject, ev.Data.OrderID, ev.Data.KeyHash)
		}
	}
	if examples == 0 {
		t.Fatal("no JSON example found in docs/events.md")
	}
}
