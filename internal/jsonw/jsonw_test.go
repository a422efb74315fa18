package jsonw

import (
	"encoding/json"
	"strings"
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
	for _, s := range texts { // the plain ones among them must be taken: checkString
		checkString(t, s)
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

// BenchmarkString appends the strings of one order's event: IDs, hashes, a
// trace parent, names, and a longer free text.
func BenchmarkString(b *testing.B) {
	strs := []string{
		"1.0", "ord_0000000000001xKQJ17HuN9eBzMppDVXZ", "orderly", "orderly.order.created.v1",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "application/json",
		"c-42", "tenant-a", "EUR", "SKU-123456", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"Lieferung an die Hintertür, bitte zweimal klingeln; falls niemand öffnet, beim Nachbarn abgeben",
	}
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	b.SetBytes(int64(n))
	buf := make([]byte, 0, 2*n)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, s := range strs {
			var ok bool
			if buf, ok = String(buf, s); !ok {
				b.Fatalf("%q left to encoding/json", s)
			}
		}
	}
}

// FuzzString checks String against encoding/json and go-json for any
// string (checkString).
func FuzzString(f *testing.F) {
	for _, s := range texts {
		f.Add(s)
	}
	f.Fuzz(checkString)
}

// checkString checks that what String writes after what the buffer held
// is what encoding/json and go-json write, byte for byte, and that it takes
// every string they write unchanged between quotes (but those with a byte
// 0xE2, which String leaves to them).
func checkString(t *testing.T, s string) {
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	goWant, err := gojson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := String([]byte("x"), s)
	if ok && (string(got[1:]) != string(want) || string(got[1:]) != string(goWant) || got[0] != 'x') {
		t.Errorf("String(%q) = %s, encoding/json %s, go-json %s", s, got, want, goWant)
	}
	unchanged := string(want) == `"`+s+`"` && !strings.Contains(s, "\xe2")
	if unchanged && !ok {
		t.Errorf("String(%q) left to encoding/json, which writes it unchanged", s)
	}
}
