// Package systemtest holds orderly's full-system tests: each starts a whole
// orderly (API, processor, projector) on a real embedded NATS server and
// talks to it over HTTP, as a client would. It has no code of its own.
package systemtest
