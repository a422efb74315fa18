package orderlytest

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// responseCheck, when set, validates every response of TryDo and Do.
var responseCheck atomic.Pointer[func(*http.Request, *http.Response) error]

// violations collects what the response check found, for the requests of
// goroutines that cannot fail a test themselves.
var violations violationLog

type violationLog struct {
	mu   sync.Mutex
	errs []error
}

func (v *violationLog) add(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err)
}

// CheckResponses makes every later Do and TryDo pass its response to check
// (internal/openapicheck's, against the OpenAPI document); nil turns the
// check off. Do fails its test on a violation; Violations lists them all.
func CheckResponses(check func(*http.Request, *http.Response) error) {
	if check == nil {
		responseCheck.Store(nil)
		return
	}
	responseCheck.Store(&check)
}

// Violations are the responses the check found wrong so far.
func Violations() []error {
	violations.mu.Lock()
	defer violations.mu.Unlock()
	return append([]error(nil), violations.errs...)
}

// MainWithResponseCheck is a TestMain that turns on the check newCheck
// makes (openapicheck.New) for the whole package and fails the run on any
// response it found wrong, including those of goroutines that could not
// fail their test; like Main, it removes the binary BuildOrderly built.
// orderlytest does not link the check itself: it is compiled again for
// each package whose own tests import it, the check once.
func MainWithResponseCheck(m *testing.M, newCheck func() (func(*http.Request, *http.Response) error, error)) {
	check, err := newCheck()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	CheckResponses(check)
	code := run(m)
	if vs := Violations(); len(vs) > 0 {
		fmt.Fprintf(os.Stderr, "%d responses break the OpenAPI document:\n", len(vs))
		for _, v := range vs {
			fmt.Fprintln(os.Stderr, " ", v)
		}
		code = 1
	}
	os.Exit(code)
}
