package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CompletionCmd is orderly completion: it prints the shell's registration
// of this binary as the completer of the command orderly. The shell then
// runs the binary with COMP_LINE set on each Tab, and main answers it
// (kongplete, from the same model as the parser: every command, flag and
// enum value, and nothing hidden).
type CompletionCmd struct {
	Shell string `arg:"" optional:"" help:"bash, zsh or fish; the shell of $SHELL when not given."`
}

// completionScripts are what each shell is given; ${bin} is this binary's
// absolute path, quoted for the shell. bash and zsh fall back to file names
// where orderly has nothing to offer (-o default: the paths of --data-dir,
// --tokens-file and others).
var completionScripts = map[string]string{
	"bash": "complete -o default -C ${bin} orderly\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -o default -C ${bin} orderly\n",
	"fish": `function __complete_orderly
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    ${bin}
end
complete -c orderly -a "(__complete_orderly)"
`,
}

// Run prints the script.
func (c *CompletionCmd) Run() error {
	shell := c.Shell
	if shell == "" {
		shell = filepath.Base(os.Getenv("SHELL"))
	}
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return fmt.Errorf("completion: the path of this binary: %w", err)
	}
	script, err := completionScript(shell, bin)
	if err != nil {
		return err
	}
	fmt.Print(script)
	return nil
}

// completionScript is shell's script for the binary at bin.
func completionScript(shell, bin string) (string, error) {
	script, ok := completionScripts[shell]
	if !ok {
		if shell == "" || shell == "." {
			return "", fmt.Errorf("completion: name the shell (bash, zsh or fish): $SHELL is not set")
		}
		return "", fmt.Errorf("completion: %q is no shell orderly completes for: name bash, zsh or fish", shell)
	}
	return strings.ReplaceAll(script, "${bin}", shellQuote(bin)), nil
}

// shellQuote quotes s as one word for bash, zsh and fish: in single quotes,
// each single quote of s written as '"'"' (the quotes closed, a double-quoted
// single quote, the quotes opened again), which all three read alike.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}
