package orderlytest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"

	"github.com/orderly-dev/orderly/api"
)

// responseCheck, when set, validates every response of TryDo and Do.
var responseCheck atomic.Pointer[func(*http.Request, *http.Response) error]

// violations collects what CheckResponses found, for the requests of
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

// CheckResponses makes every later Do and TryDo validate its response
// against the OpenAPI document the API serves (api.OpenAPI) with
// libopenapi-validator: the status must be declared for the operation, the
// body must match its schema and media type, and the declared headers theirs.
// A path or method the document does not serve must answer a 404 or 405
// problem. Do fails its test on a violation; Violations lists them all.
func CheckResponses() error {
	doc, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		return fmt.Errorf("openapi: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return fmt.Errorf("openapi: %w", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return fmt.Errorf("openapi document: %s", describe(verrs))
	}
	var mu sync.Mutex // the validator's caches are not documented as safe for concurrent use
	check := func(req *http.Request, resp *http.Response) error {
		if p := req.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
			return undocumented(resp) // the validator matches /x/ to /x; the server does not
		}
		mu.Lock()
		ok, verrs := v.ValidateHttpResponse(req, resp)
		mu.Unlock()
		if ok {
			return nil
		}
		if len(verrs) > 0 && verrs[0].ValidationType == helpers.PathValidation ||
			len(verrs) > 0 && verrs[0].ValidationSubType == helpers.ValidationMissingOperation {
			return undocumented(resp)
		}
		return errors.New(describe(verrs))
	}
	responseCheck.Store(&check)
	return nil
}

// undocumented checks the answer to a path or method the document does not
// list: 404 or 405 problem+json (405 with Allow), or 431 from the HTTP server.
func undocumented(resp *http.Response) error {
	ct := resp.Header.Get("Content-Type")
	switch {
	case resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge:
		return nil
	case resp.StatusCode == http.StatusNotFound && ct == "application/problem+json":
		return nil
	case resp.StatusCode == http.StatusMethodNotAllowed && ct == "application/problem+json" && resp.Header.Get("Allow") != "":
		return nil
	}
	return fmt.Errorf("a path or method the OpenAPI document does not list answered %d %s, want a 404 or 405 problem", resp.StatusCode, ct)
}

func describe(verrs []*verrors.ValidationError) string {
	var b strings.Builder
	for i, e := range verrs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Message)
		if e.Reason != "" {
			b.WriteString(": " + e.Reason)
		}
		for _, se := range e.SchemaValidationErrors {
			b.WriteString(" [" + se.FieldPath + ": " + se.Reason + "]")
		}
	}
	return b.String()
}

// Violations are the responses that broke the OpenAPI document so far.
func Violations() []error {
	violations.mu.Lock()
	defer violations.mu.Unlock()
	return append([]error(nil), violations.errs...)
}

// MainWithOpenAPI is a TestMain that turns CheckResponses on for the whole
// package and fails the run on any response that broke the OpenAPI document,
// including those of goroutines that could not fail their test; like Main,
// it removes the binary BuildOrderly built.
func MainWithOpenAPI(m *testing.M) {
	if err := CheckResponses(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
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
