package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// orderlyCall finds an orderly command line in documentation: `orderly ...`,
// `./orderly ...` or `go run ./cmd/orderly ...`, in a code block or inline.
var orderlyCall = regexp.MustCompile(`(?:^|[\s` + "`" + `$(])(?:go run \./cmd/orderly|\./orderly|orderly)\s+([a-z][a-z -]*[a-z](?:\s+[^` + "`" + `#&|;]*)?)`)

// shellWords splits a command line as a shell would for our docs: quotes
// grouped, $(...) kept as one word, and stops at a comment or operator.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord, quote, depth := false, byte(0), 0
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case depth > 0:
			cur.WriteByte(c)
			if c == '(' {
				depth++
			} else if c == ')' {
				depth--
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			cur.WriteString("$(")
			i++
			depth, inWord = 1, true
		case c == ' ' || c == '\t' || c == '\\':
			flush()
		case c == '#' || c == '&' || c == '|' || c == ';' || c == '`' || c == ')':
			flush()
			return words
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words
}

// TestDocumentedCommandsParse: every orderly command line in the README and
// docs/ parses with this binary's flags (names, values, enums, arguments),
// so that the docs cannot drift from the CLI.
func TestDocumentedCommandsParse(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	adrs, _ := filepath.Glob("../../docs/adr/*.md")
	files = append(append([]string{"../../README.md"}, files...), adrs...)
	checked := 0
	parsed := map[string]error{} // the arguments, joined by NUL -> the parse error
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		line, pending, inBlock := 0, "", false
		for sc.Scan() {
			line++
			text := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(text), "```") {
				inBlock = !inBlock
				continue
			}
			if inBlock {
				// A comment is prose; a transcript's output is not a command.
				if i := strings.Index(text, " #"); i >= 0 {
					text = text[:i]
				}
			}
			// A line ending in a backslash continues on the next.
			if strings.HasSuffix(strings.TrimSpace(text), "\\") {
				pending += strings.TrimSuffix(strings.TrimSpace(text), "\\") + " "
				continue
			}
			text, pending = pending+text, ""
			for _, m := range orderlyCall.FindAllStringSubmatch(text, -1) {
				args := shellWords(m[1])
				if len(args) == 0 || !isCommand(args[0]) {
					continue // prose: "orderly makes ...", "orderly's"
				}
				// The docs name many commands more than once; a parser
				// costs 85 ms under the race detector.
				key := strings.Join(args, "\x00")
				err, seen := parsed[key]
				if !seen {
					var cli CLI
					parser, perr := kong.New(&cli, kong.Name("orderly"), kong.Exit(func(int) {}), kong.Writers(io.Discard, io.Discard))
					if perr != nil {
						t.Fatal(perr)
					}
					_, err = parser.Parse(args)
					parsed[key] = err
				}
				if err != nil && (inBlock || !incomplete(err)) {
					t.Errorf("%s:%d: orderly %s: %v", filepath.Base(f), line, strings.Join(args, " "), err)
				}
				checked++
			}
		}
		fh.Close()
	}
	if checked < 20 {
		t.Fatalf("only %d documented commands found: the extraction is broken", checked)
	}
	t.Logf("%d documented orderly commands parse (%d different ones)", checked, len(parsed))
}

// incomplete tells a command named in prose (`orderly setup`) from a wrong
// one: missing flags and arguments are fine there, unknown ones are not.
func incomplete(err error) bool {
	s := err.Error()
	return strings.Contains(s, "missing flags") || strings.Contains(s, `expected "`) || strings.Contains(s, `expected one of "`) || strings.Contains(s, `got "EOL"`)
}

func isCommand(word string) bool {
	switch word {
	case "serve", "api", "processor", "projector", "setup", "credentials", "events", "projections", "check", "bench",
		"version", "healthcheck", "status", "dlq", "keys", "backup", "restore":
		return true
	}
	return false
}

// TestConfigurationTableNamesEveryServeFlag: the README's table of `orderly
// serve`'s flags names every flag the command takes, with its environment
// variables, and no flag it does not take.
func TestConfigurationTableNamesEveryServeFlag(t *testing.T) {
	section := orderlytest.Section(t, "../../README.md", "Configuration")
	flagName := regexp.MustCompile("`(--[a-z][a-z0-9-]*)`")
	envName := regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")
	type row struct {
		flags []string
		envs  string // the env column
	}
	documented := map[string]*row{} // flag -> its row
	for _, line := range strings.Split(section, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.HasPrefix(line, "| `--") {
			continue
		}
		r := &row{envs: cols[2]}
		for _, m := range flagName.FindAllStringSubmatch(cols[1], -1) {
			r.flags = append(r.flags, m[1])
			documented[m[1]] = r
		}
	}
	if len(documented) < 20 {
		t.Fatalf("only %d flags found in the README's table: the extraction is broken", len(documented))
	}

	var cli CLI
	parser, err := kong.New(&cli, kong.Name("orderly"))
	if err != nil {
		t.Fatal(err)
	}
	var serve *kong.Node
	for _, n := range parser.Model.Children {
		if n.Name == "serve" {
			serve = n
		}
	}
	if serve == nil {
		t.Fatal("no serve command")
	}
	taken := map[string][]string{} // flag -> its environment variables
	for _, group := range serve.AllFlags(true) {
		for _, f := range group {
			if f.Name != "help" && f.Name != "version" { // they print and exit
				taken["--"+f.Name] = f.Envs
			}
		}
	}
	for name, envs := range taken {
		r, ok := documented[name]
		if !ok {
			t.Errorf("%s is not in the README's Configuration table", name)
			continue
		}
		for _, env := range envs {
			if !strings.Contains(r.envs, "`"+env+"`") {
				t.Errorf("%s: the README's table does not name its environment variable %s", name, env)
			}
		}
		for _, m := range envName.FindAllStringSubmatch(r.envs, -1) {
			read := false
			for _, f := range r.flags {
				read = read || slices.Contains(taken[f], m[1])
			}
			if !read {
				t.Errorf("%s: the README's table names %s, which none of its row's flags reads", name, m[1])
			}
		}
	}
	for name := range documented {
		if _, ok := taken[name]; !ok {
			t.Errorf("the README's Configuration table names %s, which orderly serve does not take", name)
		}
	}
}

// TestDocumentedTestsExist: every test, benchmark and fuzz target that the
// README, docs/, .ci/run and scripts/ name exists, so that a renamed test
// cannot leave the fault matrix or an ADR pointing at nothing.
func TestDocumentedTestsExist(t *testing.T) {
	root := "../.."
	var docs []string
	for _, pattern := range []string{"README.md", "docs/*.md", "docs/adr/*.md", ".ci/run", "scripts/*.sh"} {
		m, _ := filepath.Glob(filepath.Join(root, pattern))
		docs = append(docs, m...)
	}
	named := orderlytest.NamesIn(t, regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`), docs...)
	if len(named) < 50 {
		t.Fatalf("only %d test names found in the docs: the extraction is broken", len(named))
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, files := range named {
		if !defined[n] {
			t.Errorf("%s, named in %s, is not a test, benchmark or fuzz target of this repository", n, strings.Join(files, ", "))
		}
	}
}
