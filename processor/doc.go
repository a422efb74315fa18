// Package processor turns CreateOrder commands into order events. Its Handler
// runs on a consumer pipeline (internal/pipeline) over the durable consumer
// "processor" of ORDER_COMMANDS; any number of instances may share that
// consumer.
//
// One key, one order: before it decides, the processor claims the command's
// hashed idempotency key with an atomic create (first writer wins). A command
// whose key is held by another order becomes an OrderRejected that names the
// holder (reason duplicate or idempotency_key_reused) and never an
// OrderCreated. This holds after the broker's duplicate window has passed,
// after restarts, and with several processors.
//
// One order, one event: the event store keeps the first terminal event of an
// order, so a redelivered command cannot store a second. The command is acked
// (by the pipeline) only after the event is stored.
//
// It may import events and idempotency; it reaches NATS only through Claims
// and EventStore, which it declares, and must not import NATS, watermill or
// the pipeline.
package processor
