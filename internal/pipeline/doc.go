// Package pipeline runs a handler on the messages of a durable JetStream
// consumer and owns every failure on the way: the subscription, the watermill
// router, the workers, retries with backoff, holds during infrastructure
// faults, and dead-lettering. The processor (CreateOrder commands) and the
// projector (events) each run on one.
//
// The contract with a Handler, for each delivery:
//
//   - Handle returns nil: the work is stored; the message is acked.
//   - Handle fails because NATS is unavailable (jsstore.IsUnavailable: the
//     connection is down, a call timed out, the store is full or refused a
//     write): the message says nothing wrong, so it is not a delivery that
//     counts. The pipeline keeps it (telling the server it is in progress),
//     stops fetching more, and retries it with backoff for as long as the fault
//     lasts.
//   - Handle returns an error marked permanent (an error with a method
//     Permanent() bool that returns true): no retry can succeed. The message is
//     given up at once.
//   - Handle returns any other error, or panics: the message is naked with a
//     growing delay and redelivered; on delivery MaxAttempts it is given up.
//   - Giving up: the handler's GiveUp records what the failure means (the
//     processor stores a 422 for the key), then the message is published to
//     DeadLetterSubject, and only when both are stored is it acked. If either
//     write fails the message is not acked: the give-up is tried again.
//
// A Handler with HandleBatch gets the messages that arrived together (up to
// a quarter of Concurrency, so that several batches are in hand at once) in
// one attempt, and returns an error for each, meaning what Handle's would;
// each delivery is settled by its own. Those held during a fault are tried
// again together; an attempt that fails as a whole (a panic) settles none of
// its deliveries, which are then tried one by one at once, so that a poisoned
// message costs the others no delivery. The sizes that form are the
// histogram orderly_pipeline_batch_size.
//
// Nothing is acked that was not handled or dead-lettered. The consumer must
// not bound deliveries itself (MaxDeliver -1): the server never moves past a
// message on its own. Handlers must be idempotent: after a crash, or when one
// outlives the consumer's ack wait, a message is delivered again.
//
// Dead letters carry the original payload and headers, without the Nats-*
// headers (a copied Nats-Msg-Id would make the dead-letter stream drop a second
// dead letter of the same key as a duplicate), plus reason_poisoned (the cause,
// as watermill's poison queue names it), Orderly-Stream, Orderly-Stream-Seq,
// Orderly-Subject and Orderly-Delivered. Their Nats-Msg-Id is
// "<stream>.<sequence>" of the original: dead-lettering the same message twice
// (a lost ack) stores one dead letter; two messages always make two.
//
// With Config.Yield, a pipeline that is behind while its stream is being
// filled and nobody waits for it pauses its fetching, up to a lag, so that
// what fills the stream has the cores (serve --decision-lag, ADR 0015).
//
// Watermill's router runs the handlers (one handler per pipeline, its
// middleware chain, Run and Close); the pipeline supplies the subscriber (a
// pull consumer with flow control; one router message per batch, or per
// delivery without HandleBatch), the policy above, a pool of long-lived
// workers and watermill's Recoverer on the worker, so that a panic is an
// error like any other (ADR 0005, ADR 0011).
package pipeline
