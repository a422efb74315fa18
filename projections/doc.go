// Package projections builds orderly's read models from the events: Project
// is the pure function from one event to what it means for the reads (the
// order as GET shows it, and the stored response of its idempotency key, the
// same bytes the processor stores as its claim, ADR 0009); the optional
// Projector writes those responses again as the events arrive; Rebuild
// recomputes ORDER_RESULTS from ORDER_EVENTS with the same function.
//
// It may import events and idempotency. It talks to NATS only through the
// small interfaces it declares (internal/jsstore implements them) and must not
// import NATS, watermill or the HTTP layer.
package projections
