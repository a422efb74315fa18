package problem_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orderly-dev/orderly/internal/problem"
)

func TestQuoted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"/v1/orders", `"/v1/orders"`},
		{"/v1/x\x1b[31m", `"/v1/x\x1b[31m"`},
		{"/v1/\u202egnp.exe", `"/v1/\u202egnp.exe"`},
		{"/v1/\xff", `"/v1/\xff"`},
		{strings.Repeat("a", problem.MaxQuoted), `"` + strings.Repeat("a", problem.MaxQuoted) + `"`},
		{strings.Repeat("a", problem.MaxQuoted) + "b", `"` + strings.Repeat("a", problem.MaxQuoted) + `"...`},
		// a cut inside a character moves back to its start
		{strings.Repeat("a", problem.MaxQuoted-1) + "é", `"` + strings.Repeat("a", problem.MaxQuoted-1) + `"...`},
	} {
		if got := problem.Quoted(tc.in); got != tc.want {
			t.Errorf("Quoted(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	long := problem.Quoted("/" + strings.Repeat("ü", 20000))
	if len(long) > 2*problem.MaxQuoted || !utf8.ValidString(long) {
		t.Errorf("a long path quoted as %d bytes (valid UTF-8: %v)", len(long), utf8.ValidString(long))
	}
}
