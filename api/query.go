package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/orderly-dev/orderly/internal/problem"
)

// onlyQuery refuses, with 400 invalid_request naming each parameter, a
// request whose query string has a parameter other than known, or cannot
// be read: a misspelt ?wiat=10s would otherwise answer at once instead of
// long-polling, and the client would not learn why.
func onlyQuery(known ...string) gin.HandlerFunc {
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return func(c *gin.Context) {
		raw := c.Request.URL.RawQuery
		if raw == "" {
			return
		}
		unknown, ok := unknownParams(raw, known)
		if !ok {
			p := problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", "the query string cannot be read")
			p.Errors = []problem.FieldError{{Field: "query", Reason: "is not a valid URL query (a % not followed by two hex digits, or a ; as a separator)"}}
			writeProblem(c, p)
			c.Abort()
			return
		}
		if len(unknown) == 0 {
			return
		}
		detail := "unknown query parameter " + plainName(unknown[0])
		if len(unknown) > MaxFieldErrors {
			detail = fmt.Sprintf("%d unknown query parameters, the first %d are listed", len(unknown), MaxFieldErrors)
		} else if len(unknown) > 1 {
			detail = fmt.Sprintf("%d unknown query parameters", len(unknown))
		}
		p := problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", detail)
		for _, name := range unknown[:min(len(unknown), MaxFieldErrors)] {
			p.Errors = append(p.Errors, problem.FieldError{Field: plainName(name), Reason: "is not a query parameter of this request (known: " + list + ")"})
		}
		writeProblem(c, p)
		c.Abort()
	}
}

// maxQueryParams is the most parameters url.ParseQuery reads (Go's default
// of GODEBUG urlmaxqueryparams).
const maxQueryParams = 10000

// unknownParams reads the raw query string as url.ParseQuery does, and
// returns the names of its parameters that are not known, sorted, each
// once; ok is false where ParseQuery fails. It keeps the names only, as
// parts of raw where they need no unescaping: a query string of thousands
// of parameters, which a client may send, is not made into a map of them
// (TestManyQueryParametersAllocateLittle).
func unknownParams(raw string, known []string) (unknown []string, ok bool) {
	params := strings.Count(raw, "&") + 1
	if params > maxQueryParams {
		return nil, false
	}
	if params > 1 {
		unknown = make([]string, 0, params) // one allocation, not a growing series
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if strings.Contains(pair, ";") {
			return nil, false
		}
		if pair == "" {
			continue
		}
		name, value, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(name)
		if err != nil {
			return nil, false
		}
		if _, err := url.QueryUnescape(value); err != nil {
			return nil, false
		}
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return slices.Compact(unknown), true
}
