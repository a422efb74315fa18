package natsx

import (
	"errors"

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
