package main

import "testing"

// TestReadsOnly: events tail --read auto reads by sequence with the keys
// that may only read ORDER_EVENTS, by the names orderly gives them, and
// through a consumer with every other key.
func TestReadsOnly(t *testing.T) {
	for path, want := range map[string]bool{
		"data/credentials/events.nk":           true,
		"/etc/orderly/events.nk":               true,
		"data/credentials/services/billing.nk": true,
		"services/shipping.nk":                 true,
		"data/credentials/operator.nk":         false,
		"data/credentials/api.nk":              false,
		"data/credentials/events.nk.bak":       false,
		"":                                     false,
		"data/credentials/services-old/x.nk":   false,
	} {
		if got := readsOnly(path); got != want {
			t.Errorf("readsOnly(%q) = %v, want %v", path, got, want)
		}
	}
}
