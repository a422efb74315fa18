package api

import (
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/problem"
)

func TestParseIdempotencyKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		values []string
		want   string
		code   string
	}{
		{"bare", []string{"7c9e6679-7425-40de-944b-e07fc1f90ae7"}, "7c9e6679-7425-40de-944b-e07fc1f90ae7", ""},
		{"quoted", []string{`"7c9e6679-7425-40de-944b-e07fc1f90ae7"`}, "7c9e6679-7425-40de-944b-e07fc1f90ae7", ""},
		{"quoted with escapes", []string{`"a\"b\\c"`}, `a"b\c`, ""},
		{"outer white space", []string{"  abc\t"}, "abc", ""},
		{"all visible ASCII bare", []string{"!#$%&'()*+-./:<=>?@[]^_`{|}~"}, "!#$%&'()*+-./:<=>?@[]^_`{|}~", ""},
		{"all visible ASCII quoted", []string{"\"!#$%&'()*+,-./:;<=>?@[]^_`{|}~\""}, "!#$%&'()*+,-./:;<=>?@[]^_`{|}~", ""},
		{"one character", []string{"x"}, "x", ""},
		{"255 characters", []string{strings.Repeat("a", 255)}, strings.Repeat("a", 255), ""},
		{"255 quoted", []string{`"` + strings.Repeat("a", 255) + `"`}, strings.Repeat("a", 255), ""},
		{"no field", nil, "", problem.CodeKeyMissing},
		{"empty", []string{""}, "", problem.CodeKeyMissing},
		{"blank", []string{"   "}, "", problem.CodeKeyMissing},
		{"empty quoted", []string{`""`}, "", problem.CodeKeyMissing},
		{"two fields", []string{"a", "b"}, "", problem.CodeKeyInvalid},
		{"two equal fields", []string{"a", "a"}, "", problem.CodeKeyInvalid},
		{"256 characters", []string{strings.Repeat("a", 256)}, "", problem.CodeKeyInvalid},
		{"256 quoted", []string{`"` + strings.Repeat("a", 256) + `"`}, "", problem.CodeKeyInvalid},
		{"inner space bare", []string{"a b"}, "", problem.CodeKeyInvalid},
		{"inner space quoted", []string{`"a b"`}, "", problem.CodeKeyInvalid},
		{"control character", []string{"a\x01b"}, "", problem.CodeKeyInvalid},
		{"DEL", []string{"a\x7fb"}, "", problem.CodeKeyInvalid},
		// Parameters that are not Structured Field parameters.
		{"text between the quoted key and its parameter", []string{`"abc"xp=1`}, "", problem.CodeKeyInvalid},
		{"parameter without a name", []string{"abc;=1"}, "", problem.CodeKeyInvalid},
		{"parameter name in upper case", []string{"abc;P=1"}, "", problem.CodeKeyInvalid},
		{"parameter name and value without =", []string{"abc;p:1"}, "", problem.CodeKeyInvalid},
		{"parameter value not ASCII", []string{"abc;p=\"\u00e9\""}, "", problem.CodeKeyInvalid},
		{"non-ASCII", []string{"clé"}, "", problem.CodeKeyInvalid},
		{"non-ASCII quoted", []string{`"clé"`}, "", problem.CodeKeyInvalid},
		{"unterminated", []string{`"abc`}, "", problem.CodeKeyInvalid},
		{"junk after quote", []string{`"abc"x`}, "", problem.CodeKeyInvalid},
		{"parameters quoted", []string{`"abc";p=1`}, "abc", ""},
		{"parameters bare", []string{`abc;p=1`}, "abc", ""},
		{"parameters of every kind", []string{`"abc"; a;b=?1;c=-1.5;d="x;y";e=:AQ==:;*f=tok/en`}, "abc", ""},
		{"a bare key ends at its semicolon", []string{`a;b`}, "a", ""},
		{"malformed parameter name", []string{`"abc";P=1`}, "", problem.CodeKeyInvalid},
		{"empty parameter value", []string{`abc;p=`}, "", problem.CodeKeyInvalid},
		{"parameters without a key", []string{`;p=1`}, "", problem.CodeKeyMissing},
		{"list of two", []string{`"a", "b"`}, "", problem.CodeKeyInvalid},
		{"bare comma", []string{"a,b"}, "", problem.CodeKeyInvalid},
		{"bad escape", []string{`"a\nb"`}, "", problem.CodeKeyInvalid},
		{"trailing backslash", []string{`"a\"`}, "", problem.CodeKeyInvalid},
		{"lone quote", []string{`"`}, "", problem.CodeKeyInvalid},
		{"long parameters with an escape", []string{"abc;p=1 \x1b[2J" + strings.Repeat("x", 5000)}, "", problem.CodeKeyInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseIdempotencyKey(tc.values)
			if tc.code != "" {
				if err == nil || err.Code != tc.code {
					t.Fatalf("ParseIdempotencyKey(%q) = %q, %v; want error %s", tc.values, got, err, tc.code)
				}
				if err.Detail == "" {
					t.Fatal("an error needs a detail")
				}
				// what it sends back of the header is quoted and cut
				if len(err.Detail) > 2*problem.MaxQuoted+128 || strings.ContainsAny(err.Detail, "\x00\x01\x1b") {
					t.Fatalf("detail of %d bytes: %.300q", len(err.Detail), err.Detail)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseIdempotencyKey(%q) = %q, %v; want %q", tc.values, got, err, tc.want)
			}
		})
	}
}

// FuzzParseIdempotencyKey checks, for any header value, that the parser never
// panics, that an accepted key is 1-255 visible ASCII characters, and that the
// quoted form of an accepted key parses to the same key.
func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"`, `""`, "a,b", `"a\\"`, "\x00", "clé", strings.Repeat("z", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseIdempotencyKey([]string{v})
		if err != nil {
			if err.Code != problem.CodeKeyMissing && err.Code != problem.CodeKeyInvalid {
				t.Fatalf("unexpected code %q", err.Code)
			}
			return
		}
		if len(key) < 1 || len(key) > MaxKeyLength {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("accepted byte 0x%02x", key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, err := ParseIdempotencyKey([]string{quoted})
		if err != nil || again != key {
			t.Fatalf("quoted form %q of accepted key %q parses to %q, %v", quoted, key, again, err)
		}
	})
}
