// Package events is orderly's contract with the outside world: the command the API
// sends to the processor, the events the processor stores, the subjects they are
// published on, and the names of the streams and buckets that hold them.
//
// Other services consume the events in this package. Everything here is plain
// data: exported types with JSON tags, versioned type names, and no dependency
// on NATS, watermill or HTTP. A change that is not backwards compatible gets a
// new type name (".v2") instead of a new meaning for an old one.
//
// Delivery is at least once. Every event has a deterministic ID (the CloudEvents
// "id", also the NATS "Nats-Msg-Id" header), so a consumer drops duplicates by
// remembering the IDs it has handled. Each order has at most one terminal event
// (created or rejected): the processor publishes it with an expected last
// sequence of 0 on the order's subjects, so the stream itself refuses a second.
package events
