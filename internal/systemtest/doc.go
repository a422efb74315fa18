// Package systemtest holds orderly's full-system tests: each starts a whole
// orderly (API and processor, and the optional projector where a test says so)
// on a real embedded NATS server and
// talks to it over HTTP, as a client would. It has no code of its own.
package systemtest
