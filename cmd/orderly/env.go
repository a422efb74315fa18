package main

import (
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/alecthomas/kong"
)

// envPrefix starts the name of every environment variable orderly reads.
const envPrefix = "ORDERLY_"

// notFlags are the ORDERLY_ variables read by something other than a flag:
// the tests' (those ending in _ are prefixes), the marker of serve's NATS
// child process, the scripts' binary and the compose file's build
// arguments.
var notFlags = []string{"ORDERLY_TEST_", "ORDERLY_HTTP_FUZZ_", "ORDERLY_INDEX_BENCH", "ORDERLY_NATS_SERVER_CHILD",
	"ORDERLY_BIN", "ORDERLY_VERSION", "ORDERLY_COMMIT"}

// unknownEnv is a variable named like orderly's that no flag of any command
// reads, and the name of the flag variable closest to it, if one is close.
type unknownEnv struct {
	Name, Closest string
}

// unknownEnvs lists the ORDERLY_ variables of environ (KEY=value) that no
// flag of app reads: a misspelt one (ORDERLY_BODYLIMIT) was ignored without
// a word. A variable another command reads is not listed (compose files
// give every role the same environment).
func unknownEnvs(app *kong.Application, environ []string) []unknownEnv {
	known := map[string]bool{}
	eachFlag(app.Node, func(_ *kong.Node, f *kong.Flag) {
		for _, e := range f.Envs {
			known[e] = true
		}
	})
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []unknownEnv
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] || slices.ContainsFunc(notFlags, func(p string) bool {
			return name == p || strings.HasSuffix(p, "_") && strings.HasPrefix(name, p)
		}) {
			continue
		}
		u := unknownEnv{Name: name}
		best := len(name)/4 + 1 // at most a quarter of the letters changed
		for _, k := range names {
			if d := levenshtein.ComputeDistance(name, k); d < best {
				u.Closest, best = k, d
			}
		}
		out = append(out, u)
	}
	return out
}

// eachFlag calls fn with every flag of n and of the commands below it, with
// the command it belongs to (a flag of several commands, such as --log-level,
// once for each).
func eachFlag(n *kong.Node, fn func(*kong.Node, *kong.Flag)) {
	for _, group := range n.AllFlags(false) {
		for _, f := range group {
			fn(n, f)
		}
	}
	for _, c := range n.Children {
		eachFlag(c, fn)
	}
}
