package api

import (
	"testing"
	"time"
)

func TestParsePrefer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		values []string
		want   Preferences
	}{
		{"none", nil, Preferences{}},
		{"respond-async", []string{"respond-async"}, Preferences{RespondAsync: true}},
		{"case and space", []string{" Respond-Async "}, Preferences{RespondAsync: true}},
		{"wait", []string{"wait=10"}, Preferences{Wait: 10 * time.Second, HasWait: true}},
		{"quoted wait", []string{`wait="5"`}, Preferences{Wait: 5 * time.Second, HasWait: true}},
		{"both in one field", []string{"respond-async, wait=3"}, Preferences{RespondAsync: true, Wait: 3 * time.Second, HasWait: true}},
		{"both in two fields", []string{"respond-async", "wait=3"}, Preferences{RespondAsync: true, Wait: 3 * time.Second, HasWait: true}},
		{"parameters ignored", []string{"respond-async; foo=bar"}, Preferences{RespondAsync: true}},
		{"unknown ignored", []string{"return=minimal, handling=strict"}, Preferences{}},
		{"bad wait ignored", []string{"wait=soon", "wait=-1"}, Preferences{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ParsePrefer(tc.values); got != tc.want {
				t.Fatalf("ParsePrefer(%q) = %+v, want %+v", tc.values, got, tc.want)
			}
		})
	}
}
