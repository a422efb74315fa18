// Package openapicheck validates HTTP responses against the OpenAPI document
// the API serves (api.OpenAPI). It is for tests:
// orderlytest.MainWithResponseCheck turns it on for a package's requests.
//
// kin-openapi reads and validates the document and finds each request's
// operation; every schema of a response (bodies and headers) is compiled
// once, when the check is made, with santhosh-tekuri/jsonschema (JSON Schema
// 2020-12, the dialect of OpenAPI 3.1), and then only applied
// (docs/adr/0030-the-openapi-check-compiled-once.md).
//
// It links only api and those libraries, never the packages the tests run,
// so that the go tool compiles it once: orderlytest, which links those
// packages, is compiled again for each package whose own tests import it.
package openapicheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/orderly-dev/orderly/api"
)

// docURL names the document for the schema compiler; the schemas' $refs
// (#/components/...) resolve in it.
const docURL = "https://orderly.invalid/openapi.json"

// New returns a check of one response to its request: the status must be
// declared for the operation, each declared header present when required
// and valid against its schema, the media type declared, and the body valid
// against its schema. A path or method the document does not serve must
// answer a 404 or 405 problem. The check reads resp.Body; it may be called
// from many goroutines (it checks one response at a time).
func New() (func(*http.Request, *http.Response) error, error) {
	raw := api.OpenAPI()
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	schemas, err := compileAll(doc, raw)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	// Neither the router nor a compiled schema is documented as safe for
	// concurrent use; one check at a time is also how the tests' load
	// generators were tuned (their checks of 0.2 ms under -race do not take
	// a second core from the servers under test).
	var mu sync.Mutex
	return func(req *http.Request, resp *http.Response) error {
		if p := req.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
			return undocumented(resp) // the server serves no path with a trailing slash
		}
		mu.Lock()
		defer mu.Unlock()
		route, _, err := router.FindRoute(req)
		if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
			return undocumented(resp)
		}
		if err != nil {
			return err
		}
		return schemas.check(route, resp)
	}, nil
}

// compiled holds the schemas of every response of the document, found by
// the document's own values (a header or a media type of a response).
type compiled struct {
	headers map[*openapi3.Header]*jsonschema.Schema
	bodies  map[*openapi3.MediaType]*jsonschema.Schema
}

// compileAll compiles the schema of each header and media type of each
// response of each operation. A response, header or schema given by $ref is
// compiled where the reference points, so that each is compiled once.
func compileAll(doc *openapi3.T, raw []byte) (*compiled, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, v); err != nil {
		return nil, err
	}
	out := &compiled{headers: map[*openapi3.Header]*jsonschema.Schema{}, bodies: map[*openapi3.MediaType]*jsonschema.Schema{}}
	compile := func(ptr string) (*jsonschema.Schema, error) {
		return c.Compile(docURL + ptr)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, ref := range op.Responses.Map() {
				at := ref.Ref // #/components/responses/X, or the response is here:
				if at == "" {
					at = "#/paths/" + escape(path) + "/" + strings.ToLower(method) + "/responses/" + status
				}
				for name, h := range ref.Value.Headers {
					if h.Value.Schema == nil || out.headers[h.Value] != nil {
						continue
					}
					hat := h.Ref
					if hat == "" {
						hat = at + "/headers/" + escape(name)
					}
					s, err := compile(hat + "/schema")
					if err != nil {
						return nil, err
					}
					out.headers[h.Value] = s
				}
				for mime, mt := range ref.Value.Content {
					if mt.Schema == nil || out.bodies[mt] != nil {
						continue
					}
					s, err := compile(at + "/content/" + escape(mime) + "/schema")
					if err != nil {
						return nil, err
					}
					out.bodies[mt] = s
				}
			}
		}
	}
	return out, nil
}

// escape makes a name one token of a JSON pointer (~0, ~1) in a URL
// fragment (%-escaped); a Replacer replaces in one pass, so the two do not
// meet.
func escape(name string) string { return pointerToken.Replace(name) }

var pointerToken = strings.NewReplacer("~", "~0", "/", "~1", "%", "%25", "{", "%7B", "}", "%7D", "+", "%2B")

func (s *compiled) check(route *routers.Route, resp *http.Response) error {
	op := route.Method + " " + route.Path
	ref := route.Operation.Responses.Status(resp.StatusCode)
	if ref == nil {
		ref = route.Operation.Responses.Default()
	}
	if ref == nil {
		return fmt.Errorf("status %d is not declared for %s", resp.StatusCode, op)
	}
	r := ref.Value
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		h := r.Headers[name]
		values := resp.Header.Values(name)
		if len(values) == 0 {
			if h.Value.Required {
				errs = append(errs, fmt.Errorf("header %s is required", name))
			}
			continue
		}
		schema := s.headers[h.Value]
		if schema == nil {
			continue
		}
		if len(values) > 1 {
			errs = append(errs, fmt.Errorf("header %s is sent %d times", name, len(values)))
			continue
		}
		v, err := headerValue(h.Value.Schema.Value, values[0])
		if err == nil {
			err = schema.Validate(v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("header %s: %q: %w", name, values[0], err))
		}
	}
	if len(r.Content) > 0 && route.Method != http.MethodHead {
		ct := resp.Header.Get("Content-Type")
		mt := r.Content.Get(ct)
		if mt == nil {
			errs = append(errs, fmt.Errorf("content type %q is not declared for %d of %s", ct, resp.StatusCode, op))
		} else if schema := s.bodies[mt]; schema != nil {
			if err := checkBody(schema, ct, resp); err != nil {
				errs = append(errs, fmt.Errorf("body: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// headerValue is a header's text as the value its schema types: an integer,
// a number or a boolean, or else the string.
func headerValue(schema *openapi3.Schema, text string) (any, error) {
	switch {
	case schema.Type.Is("integer"):
		n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if err != nil {
			return nil, errors.New("not an integer")
		}
		return n, nil
	case schema.Type.Is("number"):
		f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
		if err != nil {
			return nil, errors.New("not a number")
		}
		return f, nil
	case schema.Type.Is("boolean"):
		b, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return nil, errors.New("not a boolean")
		}
		return b, nil
	}
	return text, nil
}

// checkBody validates the body: JSON for a JSON media type (+json too),
// else its text.
func checkBody(schema *jsonschema.Schema, ct string, resp *http.Response) error {
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return err
	}
	if base, _, _ := strings.Cut(ct, ";"); !strings.HasSuffix(strings.TrimSpace(base), "json") {
		return schema.Validate(b.String())
	}
	v, err := jsonschema.UnmarshalJSON(&b)
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return schema.Validate(v)
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
