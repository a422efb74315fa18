// Package idempotency is what makes a retry safe, as plain functions and data:
// the hashed tenant-scoped key, the canonical request fingerprint, the record a
// key holds (a pending claim, then the stored response), and the rendering of
// the stored 201 and 422 responses that every retry replays byte for byte.
//
// It owns no I/O. It may import events and internal/problem; it must not import
// NATS, watermill, gin or net/http's server side, so that the API, the use
// cases, the processor and the projector can all share it.
package idempotency
