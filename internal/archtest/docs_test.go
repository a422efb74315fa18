package archtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestEveryPackageIsDocumented: every package of the module has a row in
// docs/architecture.md's table of packages and a line in the README's
// layout, so that the layout a reader is shown is the whole of it.
func TestEveryPackageIsDocumented(t *testing.T) {
	out, err := exec.Command("go", "list", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	arch, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	// The table's first column names packages in backticks; the layout is
	// the README's code block under "## Layout", one or more paths a line.
	inTable := map[string]bool{}
	for _, line := range strings.Split(string(arch), "\n") {
		if cols := strings.Split(line, "|"); len(cols) > 2 && strings.HasPrefix(line, "| `") {
			for _, m := range regexp.MustCompile("`([a-z][a-z0-9/]*)`").FindAllStringSubmatch(cols[1], -1) {
				inTable[m[1]] = true
			}
		}
	}
	_, layout, _ := strings.Cut(orderlytest.Section(t, "../../README.md", "Layout"), "```\n")
	layout, _, _ = strings.Cut(layout, "```")
	inLayout := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)(?:^|, )([a-z][a-z0-9/]*)/`).FindAllStringSubmatch(layout, -1) {
		inLayout[m[1]] = true
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p, module)
		if p == strings.TrimSuffix(module, "/") {
			continue
		}
		if !inTable[rel] {
			t.Errorf("%s has no row in docs/architecture.md's table of packages", rel)
		}
		if !inLayout[rel] {
			t.Errorf("%s is not in the README's layout", rel)
		}
	}
}

// TestDocLinksResolve: every relative link of the README and docs/ names a
// file of the repository, and a heading of it where it names one, so that a
// paragraph moved between files cannot keep links that pointed from where
// it was.
func TestDocLinksResolve(t *testing.T) {
	root := "../.."
	var docs []string
	for _, pattern := range []string{"README.md", "docs/*.md", "docs/adr/*.md", "deploy/*.md", "examples/*.md", "examples/*/*.md"} {
		m, _ := filepath.Glob(filepath.Join(root, pattern))
		docs = append(docs, m...)
	}
	if len(docs) < 10 {
		t.Fatalf("only %d documents found", len(docs))
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			checked++
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which is not there", rel, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(t, path), anchor) {
				t.Errorf("%s links to %s, whose file has no heading %q", rel, target, anchor)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d relative links found: the extraction is broken", checked)
	}
}

// anchors are the ids GitHub gives the headings of a Markdown file:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func anchors(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var ids []string
	for _, line := range strings.Split(withoutCode(string(b)), "\n") {
		h := strings.TrimLeft(line, "#")
		if len(h) == len(line) || !strings.HasPrefix(h, " ") {
			continue
		}
		var id strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				id.WriteRune(r)
			case r == ' ':
				id.WriteByte('-')
			}
		}
		s := id.String()
		if n := seen[s]; n > 0 {
			ids = append(ids, fmt.Sprintf("%s-%d", s, n))
		} else {
			ids = append(ids, s)
		}
		seen[s]++
	}
	return ids
}

// withoutCode is s without its fenced code blocks, whose brackets and
// hashes are not links nor headings.
func withoutCode(s string) string {
	var out strings.Builder
	fenced := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String()
}
