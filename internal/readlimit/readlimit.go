// Package readlimit reads what comes from outside (an answer of a URL an
// operator names, a file of a backup) up to a bound, and refuses more: a
// source that sends without end must not take the reader's memory.
package readlimit

import (
	"errors"
	"fmt"
	"io"
)

// ErrTooLarge matches every *TooLargeError (errors.Is).
var ErrTooLarge = errors.New("more bytes than the bound")

// TooLargeError refuses a source that gave more than Max bytes.
type TooLargeError struct{ Max int64 }

func (e *TooLargeError) Error() string        { return fmt.Sprintf("more than %d bytes", e.Max) }
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// ReadAll reads r to its end, as io.ReadAll does, but reads at most max+1
// bytes: a source longer than max is refused with *TooLargeError.
func ReadAll(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err == nil && int64(len(b)) > max {
		return nil, &TooLargeError{Max: max}
	}
	return b, err
}
