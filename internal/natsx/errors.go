package natsx

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

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
