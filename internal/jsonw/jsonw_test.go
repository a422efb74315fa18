package jsonw

import (
	"encoding/json"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/orderly-dev/orderly/events"
)

// texts are plain strings and one of each kind that encoding/json escapes
// or replaces.
var texts = []string{
	"c-42", "", "é", "😀", "€", "a\"b", `a\b`, "<script>", "a<b", "a&b", "a>b", "\t", "\x00", "\x7f",
	"\u2028", "\u2029", "\xff", "a\xe2", "\xe2\x80", "ok\xe2\x80\xa8", "\ud7ff", "\U0010ffff",
}

func TestStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range texts {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		goWant, err := gojson.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := String(nil, s); ok && (string(got) != string(want) || string(got) != string(goWant)) {
			t.Errorf("String(%q) = %s, encoding/json %s, go-json %s", s, got, want, goWant)
		}
	}
	for _, s := range []string{"c-42", "é", "😀", "\x7f"} { // the plain ones are taken
		if _, ok := String(nil, s); !ok {
			t.Errorf("String(%q) left to encoding/json", s)
		}
	}
}

func TestTimeMatchesMarshalJSON(t *testing.T) {
	t.Parallel()
	times := []time.Time{
		time.Date(2026, 12, 1, 5, 7, 43, 0, time.UTC),
		time.Date(2026, 12, 1, 5, 7, 43, 120000000, time.UTC),
		time.Date(2026, 12, 1, 5, 7, 43, 123456789, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 5, 7, 43, 5, time.FixedZone("x", 3600)),
		time.Date(2026, 12, 1, 5, 7, 43, 5, time.FixedZone("far", 25*3600)),
		time.Now(), // with a monotonic reading
		{},
	}
	for _, tm := range times {
		want, err := json.Marshal(struct {
			T time.Time `json:"t"`
		}{tm})
		got, ok := New(nil).Time('{', "t", tm).Raw("}").Bytes()
		if !ok {
			continue
		}
		if err != nil {
			t.Errorf("Time(%v) took a time that MarshalJSON refuses: %v", tm, err)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("Time(%v) = %s, encoding/json %s", tm, got, want)
		}
	}
	if _, ok := New(nil).Time('{', "t", times[2]).Bytes(); !ok {
		t.Error("a UTC time left to encoding/json")
	}
}

// TestWriterMatchesEncodingJSON writes an object with every appender and
// compares it with encoding/json's encoding of the same struct; a value the
// writer cannot take makes the whole document fail, however many members
// follow it.
func TestWriterMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	type doc struct {
		ID    string        `json:"id"`
		Total int64         `json:"total"`
		Items []events.Item `json:"items"`
		At    time.Time     `json:"at"`
	}
	at := time.Date(2026, 12, 2, 6, 0, 0, 5, time.UTC)
	cases := []doc{
		{ID: "ord_1", Total: 4990, Items: []events.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 2495}}, At: at},
		{ID: "", Total: -1, Items: []events.Item{}, At: at},
		{ID: "é😀", Total: 1 << 62, Items: nil, At: at},
		{ID: "x", Items: []events.Item{{SKU: "a"}, {SKU: "b", Quantity: 3, UnitPrice: -7}}, At: at},
	}
	for _, d := range cases {
		want, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := New(nil).String('{', "id", d.ID).Int(',', "total", d.Total).
			Items(',', "items", d.Items).Time(',', "at", d.At).Raw("}").Bytes()
		if !ok || string(got) != string(want) {
			t.Errorf("%+v: got %s (ok %v), encoding/json %s", d, got, ok, want)
		}
	}

	for name, w := range map[string]Writer{
		"an escaped id":       New(nil).String('{', "id", "a<b").Int(',', "total", 1),
		"an escaped sku":      New(nil).Items('{', "items", []events.Item{{SKU: "ok"}, {SKU: "\"q\""}}).Int(',', "total", 1),
		"a time with a zone":  New(nil).Time('{', "at", at.In(time.FixedZone("x", 3600))).String(',', "id", "fine"),
		"invalid UTF-8 first": New(nil).String('{', "id", "\xff").Items(',', "items", nil).Time(',', "at", at),
	} {
		if _, ok := w.Raw("}").Bytes(); ok {
			t.Errorf("%s: the writer reported ok; encoding/json must write this document", name)
		}
	}
}
