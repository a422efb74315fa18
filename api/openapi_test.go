package api_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/internal/problem"
)

// TestOpenAPINamesEveryProblemCode: a client generated from the document
// knows every code the server can send.
func TestOpenAPINamesEveryProblemCode(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Code struct {
							Enum []string `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Problem"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	enum := doc.Components.Schemas.Problem.Properties.Code.Enum
	for _, c := range problem.Codes {
		if !slices.Contains(enum, c) {
			t.Errorf("code %s is missing from the Problem schema", c)
		}
	}
	for _, c := range enum {
		if !slices.Contains(problem.Codes, c) {
			t.Errorf("the Problem schema names %s, which the server never sends", c)
		}
	}
}
