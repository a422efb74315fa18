package check_test

import (
	"testing"

	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// The tests share one orderly binary (orderlytest.BuildOrderly).
func TestMain(m *testing.M) { orderlytest.Main(m) }
