package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// TestCompletion: the binary answers the shell's completion requests
// (COMP_LINE) with orderly's commands, flags and enum values, nothing
// hidden, and runs nothing else; orderly completion prints each shell's
// registration of the binary, which bash takes.
func TestCompletion(t *testing.T) {
	t.Parallel()
	bin := orderlytest.BuildOrderly(t)
	complete := func(line string) []string {
		t.Helper()
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "COMP_LINE="+line)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("COMP_LINE=%q: %v", line, err)
		}
		got := strings.Fields(string(out))
		slices.Sort(got)
		return got
	}
	for line, want := range map[string][]string{
		"orderly ser":                    {"serve"},
		"orderly tokens ":                {"add", "list", "remove"},
		"orderly b":                      {"backup", "bench"}, // not bench-ceiling-server: hidden
		"orderly serve --data":           {"--data-dir"},
		"orderly serve --batch-writes ":  {"auto", "off", "on"},
		"orderly --log-format ":          {"json", "text"},
		"orderly tokens remove --tenant": {"--tenant"},
	} {
		if got := complete(line); !slices.Equal(got, want) {
			t.Errorf("COMP_LINE=%q: %q, want %q", line, got, want)
		}
	}
	// A completion request runs no command: the command of its line is not
	// the one run (the binary is run with no arguments; COMP_LINE alone says
	// what to complete), and a request on its own arguments does nothing
	// either: tokens add would make the file.
	tokens := filepath.Join(t.TempDir(), "tokens")
	cmd := exec.Command(bin, "tokens", "add", "acme", "--tokens-file", tokens)
	cmd.Env = append(os.Environ(), "COMP_LINE=orderly tokens add acme --tokens-file "+tokens+" --")
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "--tokens-file") {
		t.Errorf("a completion request with tokens add's arguments: %q, %v", out, err)
	}
	if _, err := os.Stat(tokens); !os.IsNotExist(err) {
		t.Errorf("a completion request ran tokens add: %v", err)
	}

	out, err := exec.Command(bin, "completion", "bash").Output()
	if want := "complete -o default -C '" + bin + "' orderly\n"; err != nil || string(out) != want {
		t.Fatalf("completion bash: %q, %v; want %q", out, err, want)
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		reg, err := exec.Command(bash, "-c", string(out)+"complete -p orderly").CombinedOutput()
		if err != nil || !strings.Contains(string(reg), "-C '"+bin+"'") {
			t.Errorf("bash took %q as: %s, %v", out, reg, err)
		}
	}
	cmd = exec.Command(bin, "completion")
	cmd.Env = append(os.Environ(), "SHELL=/usr/bin/fish")
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "complete -c orderly") {
		t.Errorf("completion with SHELL=/usr/bin/fish: %q, %v", out, err)
	}
	cmd = exec.Command(bin, "completion")
	cmd.Env = append(os.Environ(), "SHELL=")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "$SHELL is not set") {
		t.Errorf("completion without SHELL: %q, %v", out, err)
	}
}

// TestShellQuote: a path with quotes and spaces is one word to the shell.
func TestShellQuote(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to read the quoting")
	}
	for _, s := range []string{"/usr/bin/orderly", "/tmp/it's here/orderly", `/a "b" $HOME \n`} {
		out, err := exec.Command(bash, "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("%q quoted as %s: bash read %q, %v", s, shellQuote(s), out, err)
		}
	}
	if _, err := completionScript("tcsh", "/x"); err == nil || !strings.Contains(err.Error(), "bash, zsh or fish") {
		t.Errorf("tcsh: %v", err)
	}
}
