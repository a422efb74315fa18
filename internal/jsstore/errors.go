package jsstore

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errCodeDuplicateInProcess is "duplicate message id is in process": on a
// replicated stream, a message whose ID matches one that is being stored right
// now, before the original's ack.
const errCodeDuplicateInProcess = 10158

// IsDuplicateInProcess reports whether err says that a message with the same
// ID is being stored at this moment (replicated streams only). Publishing again
// a moment later gets the duplicate ack, with the original's sequence.
func IsDuplicateInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDuplicateInProcess
}

// IsWrongLastSequence reports whether err is the server refusing a publish whose
// expected last (subject) sequence did not match: 10071 on a standalone stream,
// 10164 on a replicated one.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// JetStream error codes of faults of the store or the cluster: the request
// was fine, the store could not take it now.
var unavailableCodes = map[jetstream.ErrorCode]bool{
	10002: true, // resource limits exceeded for account (errCodeAccountResourcesExceeded: its JetStream storage limit)
	10004: true, // cluster incomplete results
	10005: true, // no suitable peers for placement (a cluster still forming)
	10008: true, // JetStream system temporarily unavailable
	10009: true, // cluster can not handle request (no leader)
	10023: true, // insufficient resources
	10028: true, // insufficient memory resources
	10047: true, // insufficient storage resources
	10077: true, // stream store failed (write error, no space, max bytes)
	10118: true, // stream is offline
	10119: true, // consumer is offline
	10163: true, // expected last sequence per subject temporarily unavailable
	10194: true, // stream is offline: reason
	10195: true, // consumer is offline: reason
}

// IsUnavailable reports whether err is a fault of NATS rather than of the
// request: the connection is down or closed, a call timed out, nobody answered
// (no leader, no stream), or the store refused the write for want of space or
// after a write error. Such a call may succeed later unchanged; it says
// nothing about the message that was being handled.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return unavailableCodes[apiErr.ErrorCode] || apiErr.Code == 503
	}
	var netErr net.Error
	return errors.Is(err, ErrStorageLow) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, nats.ErrStaleConnection) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.As(err, &netErr)
}

// StoreError is the error of a call the application makes through an adapter
// of this package. Besides the NATS error it wraps, it says what the caller
// needs to decide, without knowing NATS:
//
//   - Temporary: NATS was unavailable (IsUnavailable); the same call may
//     succeed later;
//   - NotStored: the write certainly stored nothing (the server answered with
//     an error, nobody received it, or it was never sent). A write that timed
//     out is not NotStored: it may have been stored.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// Temporary reports whether the call may succeed if tried again within a
// request: NATS was unavailable. A write refused for want of room is not
// (the disk guard's, or the account's JetStream storage limit): the room
// does not come back in seconds, so the API answers 503 at once instead of
// holding its client for the request's whole budget.
func (e *StoreError) Temporary() bool {
	return IsUnavailable(e.Err) && !outOfRoom(e.Err)
}

// errCodeAccountResourcesExceeded is "resource limits exceeded for account":
// the write would take the account past its JetStream storage limit.
const errCodeAccountResourcesExceeded = 10002

// outOfRoom reports whether err is a write refused for want of room that
// stays so until an operator acts or retention frees some.
func outOfRoom(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, ErrStorageLow) || errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAccountResourcesExceeded
}

// NotStored reports whether a write certainly stored nothing.
func (e *StoreError) NotStored() bool {
	var apiErr *jetstream.APIError
	return errors.Is(e.Err, ErrStorageLow) ||
		errors.As(e.Err, &apiErr) ||
		errors.Is(e.Err, nats.ErrNoResponders) ||
		// A publish's tries all met no responders (nats.go's answer then,
		// and FastPublish's): nobody received it.
		errors.Is(e.Err, jetstream.ErrNoStreamResponse) ||
		errors.Is(e.Err, nats.ErrConnectionClosed) ||
		errors.Is(e.Err, nats.ErrInvalidConnection) ||
		errors.Is(e.Err, nats.ErrNoServers)
}

// storeErr wraps err in a StoreError (nil stays nil).
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	return &StoreError{Err: err}
}

// Denied returns the permissions violation nc last received, or nil. The
// server answers a request its user may not publish (or whose reply it may
// not receive) with nothing but an error on the connection, so the request
// times out as if JetStream were not up yet; a wait for JetStream asks Denied
// after each timeout, and stops at once on a user without the rights.
func Denied(nc *nats.Conn) error {
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	return nil
}

// WithDenied adds to err the permissions violation nc met, if any (see
// Denied): the error of a request the server refused to route is only a
// timeout, which says nothing of why.
func WithDenied(err error, nc *nats.Conn) error {
	if err == nil {
		return nil
	}
	if denied := Denied(nc); denied != nil {
		return fmt.Errorf("%w: the NATS user may not do this (%v)", err, denied)
	}
	return err
}
