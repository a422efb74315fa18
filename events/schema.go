package events

import "embed"

// Schemas holds the JSON Schema (draft 2020-12) of every event type, named
// "schema/<type>.json", for example "schema/orderly.order.created.v1.json".
//
//go:embed schema/*.json
var Schemas embed.FS

// SchemaFile is the name in Schemas of the schema of an event type.
func SchemaFile(eventType string) string { return "schema/" + eventType + ".json" }
