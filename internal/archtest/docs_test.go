package archtest

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

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
