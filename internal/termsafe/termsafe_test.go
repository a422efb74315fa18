package termsafe_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/orderly-dev/orderly/internal/termsafe"
)

func TestString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                               "",
		"ord_0000000000001 tenant=a":     "ord_0000000000001 tenant=a",
		"Zürich 東京 €5":                   "Zürich 東京 €5",
		"\x1b]0;pwned\x07":               `\u001b]0;pwned\u0007`,
		"\x1b[2J\x1b[Hclean":             `\u001b[2J\u001b[Hclean`,
		"line\nbreak\rtab\t":             `line\u000abreak\u000dtab\u0009`,
		"del\x7f c1\u009b[31m":           `del\u007f c1\u009b[31m`,
		"evil\u202etxt.exe \u2066x":      `evil\u202etxt.exe \u2066x`,
		"bad\xffutf8\xc3":                `bad\ufffdutf8\ufffd`,
		`{"a":"\u001b"}`:                 `{"a":"\u001b"}`,
		"{\"customer_id\":\"\x1b[31m\"}": `{"customer_id":"\u001b[31m"}`,
	} {
		if got := termsafe.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEveryDirectionMarkIsEscaped: each character that changes the
// direction of the text around it (Unicode's bidirectional controls: the
// Arabic letter mark, LRM and RLM, the embeddings and overrides, the
// isolates) is escaped, and the characters beside those ranges are not.
func TestEveryDirectionMarkIsEscaped(t *testing.T) {
	t.Parallel()
	marks := []rune{0x061c, 0x200e, 0x200f}
	for r := rune(0x202a); r <= 0x202e; r++ {
		marks = append(marks, r)
	}
	for r := rune(0x2066); r <= 0x2069; r++ {
		marks = append(marks, r)
	}
	for _, r := range marks {
		if got, want := termsafe.String("a"+string(r)+"b"), fmt.Sprintf(`a\u%04xb`, r); got != want {
			t.Errorf("U+%04X: %q, want %q", r, got, want)
		}
	}
	for _, r := range []rune{0x061b, 0x061d, 0x200d, 0x2010, 0x202f, 0x206a} {
		if s := "a" + string(r) + "b"; termsafe.String(s) != s {
			t.Errorf("U+%04X escaped: %q", r, termsafe.String(s))
		}
	}
}

// TestJSONKeepsItsMeaning: a JSON document with such characters in its
// strings, made safe, is still valid and decodes to the same values.
func TestJSONKeepsItsMeaning(t *testing.T) {
	t.Parallel()
	doc := "{\"customer_id\":\"c\x1b[31m\u202e1\",\"items\":[\"\u0085x\"]}"
	safe := termsafe.String(doc)
	var a, b map[string]any
	if err := json.Unmarshal([]byte(safe), &a); err != nil {
		t.Fatalf("%s: %v", safe, err)
	}
	if err := json.Unmarshal([]byte(doc), &b); err == nil {
		t.Fatal("the raw document should not even be valid JSON (a raw control character in a string)")
	}
	if a["customer_id"] != "c\x1b[31m\u202e1" || a["items"].([]any)[0] != "\u0085x" {
		t.Fatalf("decoded %v", a)
	}
}
