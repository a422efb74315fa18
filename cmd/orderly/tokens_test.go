package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/orderly-dev/orderly/api"
)

// TestTokensRemove: tokens are removed by the ID tokens add prints and
// tokens list shows, or by tenant; the file's other lines and its mode
// stay; an ID of no token, or of two, a tenant without tokens, and a
// removal of every token change nothing.
func TestTokensRemove(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	head := byteOrderMark + "# clients of the shop\n\n"
	if err := os.WriteFile(path, []byte(head), 0o640); err != nil {
		t.Fatal(err)
	}
	a1 := must(addToken(path, "acme", rand.Reader))
	a2 := must(addToken(path, "acme", rand.Reader))
	b1 := must(addToken(path, "bolt", rand.Reader))
	if err := os.WriteFile(path, append(must(os.ReadFile(path)), "# end\n"...), 0o640); err != nil {
		t.Fatal(err)
	}
	_, lines, err := readTokenLines(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []tokenLine{{"acme", api.TokenID(a1), 3, a1}, {"acme", api.TokenID(a2), 4, a2}, {"bolt", api.TokenID(b1), 5, b1}}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("listed %v, want %v", lines, want)
	}
	unchanged := func(what string, before []byte) {
		t.Helper()
		if after := must(os.ReadFile(path)); !bytes.Equal(after, before) {
			t.Errorf("%s changed the file:\n%s", what, after)
		}
	}

	before := must(os.ReadFile(path))
	for _, tc := range []struct {
		ids    []string
		tenant string
		err    string
	}{
		{nil, "", "name the tokens to remove"},
		{[]string{"0badc0de"}, "", `no token of ID "0badc0de"`},
		{[]string{api.TokenID(a1), "0badc0de"}, "", `no token of ID "0badc0de"`},
		{nil, "nobody", `no token of tenant "nobody"`},
		{[]string{api.TokenID(b1)}, "acme", "its every token"},
	} {
		if _, err := removeTokens(path, tc.ids, tc.tenant); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("remove %v --tenant %q: %v, want %q", tc.ids, tc.tenant, err, tc.err)
		}
		unchanged(fmt.Sprintf("remove %v --tenant %q", tc.ids, tc.tenant), before)
	}

	// By ID, as tokens add printed it or in capitals.
	removed, err := removeTokens(path, []string{strings.ToUpper(api.TokenID(a1))}, "")
	if err != nil || len(removed) != 1 || removed[0].token != a1 || removed[0].Line != 3 {
		t.Fatalf("remove %s: %v, %v", api.TokenID(a1), removed, err)
	}
	wantFile := head + "acme " + a2 + "\nbolt " + b1 + "\n# end\n"
	if got := string(must(os.ReadFile(path))); got != wantFile {
		t.Fatalf("after the removal:\n%q\nwant\n%q", got, wantFile)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, %v; want 0640 as before", fi.Mode().Perm(), err)
	}
	if got, err := readTokens(path); err != nil || !maps.Equal(got, map[string]string{a2: "acme", b1: "bolt"}) {
		t.Errorf("the APIs would read %v, %v", got, err)
	}

	// By tenant.
	if removed, err := removeTokens(path, nil, "bolt"); err != nil || len(removed) != 1 || removed[0].token != b1 {
		t.Fatalf("remove --tenant bolt: %v, %v", removed, err)
	}
	if got, err := readTokens(path); err != nil || !maps.Equal(got, map[string]string{a2: "acme"}) {
		t.Errorf("the APIs would read %v, %v", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 2 {
		t.Errorf("the directory holds %d entries, want the file and its lock", len(entries))
	}
}

// TestTokensRemoveAmbiguousID: an ID that two tokens share (8 hex digits
// can collide) removes neither.
func TestTokensRemoveAmbiguousID(t *testing.T) {
	t.Parallel()
	seen := make(map[string]string)
	var x, y string
	for i := 0; x == ""; i++ {
		tok := fmt.Sprintf("collide-%016d", i)
		if other, ok := seen[api.TokenID(tok)]; ok {
			x, y = other, tok
		}
		seen[api.TokenID(tok)] = tok
	}
	path := filepath.Join(t.TempDir(), "tokens")
	content := "a " + x + "\nb " + y + "\nc " + strings.Repeat("z", 32) + "\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := removeTokens(path, []string{api.TokenID(x)}, ""); err == nil || !strings.Contains(err.Error(), "names 2 tokens (lines 1 and 2)") {
		t.Errorf("remove %s: %v", api.TokenID(x), err)
	}
	if got := string(must(os.ReadFile(path))); got != content {
		t.Errorf("the file changed: %q", got)
	}
}

// TestTokensAddAndRemoveAtOnce: tokens added while others are removed are
// all kept: remove writes the file again from what it read, and the lock
// keeps an add from landing between the two.
func TestTokensAddAndRemoveAtOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	keep := must(addToken(path, "keep", rand.Reader))
	var gone []string
	for range 20 {
		gone = append(gone, must(addToken(path, "gone", rand.Reader)))
	}
	var wg sync.WaitGroup
	added := make([]string, 20)
	for i := range added {
		wg.Go(func() { added[i] = must(addToken(path, "new", rand.Reader)) })
	}
	for _, tok := range gone {
		wg.Go(func() {
			if _, err := removeTokens(path, []string{api.TokenID(tok)}, ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := readTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{keep: "keep"}
	for _, tok := range added {
		want[tok] = "new"
	}
	if !maps.Equal(got, want) {
		t.Errorf("%d tokens left, want %d: the %d added and the one kept", len(got), len(want), len(added))
	}
}

// TestTokensRemoveKeepsLineEndings: a file written on Windows (CRLF, no
// newline at the end) keeps its endings on the lines that stay.
func TestTokensRemoveKeepsLineEndings(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	a, b, c := strings.Repeat("a", 32), strings.Repeat("b", 32), strings.Repeat("c", 32)
	if err := os.WriteFile(path, []byte("# shop\r\nacme "+a+"\r\nbolt "+b+"\r\ncore "+c), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := removeTokens(path, []string{api.TokenID(b)}, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := string(must(os.ReadFile(path))), "# shop\r\nacme "+a+"\r\ncore "+c; got != want {
		t.Errorf("after removing bolt: %q, want %q", got, want)
	}
	if _, err := removeTokens(path, nil, "core"); err != nil {
		t.Fatal(err)
	}
	if got, want := string(must(os.ReadFile(path))), "# shop\r\nacme "+a+"\r\n"; got != want {
		t.Errorf("after removing core: %q, want %q", got, want)
	}
}
