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
		q, err := url.ParseQuery(raw)
		if err != nil {
			p := problem.New(http.StatusBadRequest, problem.CodeInvalid, "Invalid request", "the query string cannot be read")
			p.Errors = []problem.FieldError{{Field: "query", Reason: "is not a valid URL query (a % not followed by two hex digits, or a ; as a separator)"}}
			writeProblem(c, p)
			c.Abort()
			return
		}
		var unknown []string
		for name := range q {
			if !slices.Contains(known, name) {
				unknown = append(unknown, name)
			}
		}
		if len(unknown) == 0 {
			return
		}
		slices.Sort(unknown)
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
