package processor

import "errors"

// permanentError marks a failure that no retry can mend.
type permanentError struct{ err error }

func (e permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent reports true: the pipeline recognises permanent errors by this
// method, without importing this package.
func (e permanentError) Permanent() bool { return true }

// Permanent marks err as permanent: the command is dead-lettered at once, not
// retried.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
