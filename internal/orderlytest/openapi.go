package orderlytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

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
// against the OpenAPI document the API serves (api.OpenAPI) with kin-openapi
// (openapi3filter, JSON Schema 2020-12 as OpenAPI 3.1 asks): the status must
// be declared for the operation, the declared headers must match their
// schemas, and the body its media type and schema. A path or method the
// document does not serve must answer a 404 or 405 problem. Do fails its test
// on a violation; Violations lists them all.
//
// kin-openapi rather than libopenapi-validator (used until 2026-12-07): the
// same checks (TestCheckResponsesFindsEachViolation), and about 11 s of
// compiling under -race against 362 s, which every CI run on a machine
// without a build cache paid, besides 15 s for each of this package's six
// compiles (a test variant for each package it imports that has tests of
// its own) against 1.5 s.
func CheckResponses() error {
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
	if err != nil {
		return fmt.Errorf("openapi: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return fmt.Errorf("openapi document: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return fmt.Errorf("openapi: %w", err)
	}
	check := func(req *http.Request, resp *http.Response) error {
		if p := req.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
			return undocumented(resp) // the server serves no path with a trailing slash
		}
		route, params, err := router.FindRoute(req)
		if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
			return undocumented(resp)
		}
		if err != nil {
			return err
		}
		if req.Method == http.MethodHead {
			// ValidateResponse passes every HEAD without a look (and
			// every 301, 304, 307 and 308, which the API never answers);
			// with the method renamed it checks the status and headers
			// against the HEAD operation of the route found above (which
			// declares no body).
			c := *req
			c.Method = "HEAD (checked)"
			req = &c
		}
		return openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 resp.StatusCode,
			Header:                 resp.Header,
			Body:                   resp.Body,
			Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		})
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
