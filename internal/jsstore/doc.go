// Package jsstore is orderly's one home for NATS JetStream clients: the
// connection, the topology (streams, the results bucket, durable consumers),
// and the adapters the rest of orderly talks to through interfaces it declares
// itself:
//
//   - Commands: ORDER_COMMANDS, where the API publishes CreateOrder commands;
//   - Results: the ORDER_RESULTS bucket, with the processor's atomic claim
//     (the key's stored response, ADR 0009), the optional projector's writes,
//     and the watch that feeds the API's hub;
//   - Events: ORDER_EVENTS, the source of truth: append once per order, read
//     one order, follow the decisions, read everything for a rebuild.
//
// It maps NATS errors to the few cases the rest of orderly cares about. It must
// not import nats-server (see internal/natsserver), the HTTP layer, the use
// cases or the processor.
package jsstore
