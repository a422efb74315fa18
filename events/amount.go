package events

import (
	"strconv"

	"github.com/bojanz/currency"
)

// FormatAmount writes an amount in minor units (an item's unit_price, an
// order's total) in the currency's major unit, with the decimals ISO 4217
// gives the currency's minor unit: 4990 is "49.90 EUR", "4990 JPY" (the
// yen has no minor unit) and "4.990 KWD" (the dinar has three decimals).
// The API takes any three upper-case letters as a currency; for a code that
// ISO 4217 does not list, the amount is written as it is stored: "4990
// minor units of ABC".
func FormatAmount(minor int64, currencyCode string) string {
	a, err := currency.NewAmountFromInt64(minor, currencyCode)
	if err != nil {
		return strconv.FormatInt(minor, 10) + " minor units of " + currencyCode
	}
	return a.String()
}
