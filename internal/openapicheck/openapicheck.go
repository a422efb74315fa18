// Package openapicheck validates HTTP responses against the OpenAPI document
// the API serves (api.OpenAPI), with libopenapi-validator. It is for tests:
// orderlytest.MainWithResponseCheck turns it on for a package's requests.
//
// It links only api and the validator, never the packages the tests run,
// so that the go tool compiles it once: orderlytest, which links those
// packages, is compiled again for each package whose own tests it serves,
// and with the validator in it each of those compiles took 16-20 s under
// the race detector instead of 1.5 s.
package openapicheck

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"

	"github.com/orderly-dev/orderly/api"
)

// New returns a check of one response to its request: the status must be
// declared for the operation, the body must match its schema and media
// type, and the declared headers theirs. A path or method the document does
// not serve must answer a 404 or 405 problem. The check reads resp.Body; it
// is safe for concurrent use.
func New() (func(*http.Request, *http.Response) error, error) {
	doc, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi: %w", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("openapi document: %s", describe(verrs))
	}
	var mu sync.Mutex // the validator's caches are not documented as safe for concurrent use
	return func(req *http.Request, resp *http.Response) error {
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
	}, nil
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
