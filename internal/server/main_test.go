package server_test

import (
	"testing"

	"github.com/orderly-dev/orderly/internal/openapicheck"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// Every response the tests get is validated against the OpenAPI document.
func TestMain(m *testing.M) { orderlytest.MainWithResponseCheck(m, openapicheck.New) }
