package events_test

import (
	"math"
	"testing"

	"github.com/orderly-dev/orderly/events"
)

// TestFormatAmount: minor units are written with the decimals of the
// currency's ISO 4217 minor unit, not always two (4990 yen were printed as
// "49.90 JPY", a hundredth of the order), down to the limits of an int64.
func TestFormatAmount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{4990, "EUR", "49.90 EUR"},
		{5, "EUR", "0.05 EUR"},
		{0, "EUR", "0.00 EUR"},
		{-4990, "EUR", "-49.90 EUR"},
		{4990, "JPY", "4990 JPY"},
		{4990, "KRW", "4990 KRW"},
		{4990, "KWD", "4.990 KWD"},
		{4990, "IQD", "4.990 IQD"}, // ISO 4217's three decimals, where CLDR's display has none
		{4990, "HUF", "49.90 HUF"},
		{4990, "CLF", "0.4990 CLF"},
		{math.MaxInt64, "EUR", "92233720368547758.07 EUR"},
		{math.MinInt64, "EUR", "-92233720368547758.08 EUR"},
		{math.MaxInt64, "JPY", "9223372036854775807 JPY"},
		{4990, "ABC", "4990 minor units of ABC"},
		{4990, "eur", "4990 minor units of eur"},
	} {
		if got := events.FormatAmount(tc.minor, tc.currency); got != tc.want {
			t.Errorf("FormatAmount(%d, %q) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}
