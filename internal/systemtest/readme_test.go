package systemtest

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestREADMETranscripts runs the curl transcripts of the README's "Every
// response, with curl" against a fresh orderly serve, in the README's order,
// and compares each answer with the one printed there: the status, every
// header shown (but Content-Length, whose digits follow the timestamps), and
// the body, timestamps aside (a body elided with "..." up to the elision).
// The order IDs are deterministic (keyed: the command's sequence and the
// key's hash), so they must match too. The transcripts that start processes
// get them: an API without a processor, and an API on another process's NATS
// that is then stopped.
func TestREADMETranscripts(t *testing.T) {
	t.Parallel()
	section := orderlytest.Section(t, "../../README.md", "Every response, with curl")
	m := regexp.MustCompile(`(?s)ORDER='(\{.*?\})'`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the section sets no ORDER")
	}
	vars := map[string]string{"ORDER": strings.Join(strings.Fields(m[1]), " ")}

	start1 := func(roles server.Roles) *orderlytest.Instance {
		cfg := orderlytest.Config(t)
		cfg.OrderIDs = jsstore.OrderIDsKeyed // the README shows keyed IDs
		cfg.Roles = roles
		return orderlytest.Start(t, cfg)
	}
	main := start1(server.DefaultRoles)
	files := map[string][]byte{}
	ran := 0
	for _, block := range consoleBlocks(section) {
		hosts := map[string]*orderlytest.Instance{"localhost:8080": main}
		var first *orderlytest.Instance // the block's first process, for kill %1
		for _, step := range transcriptSteps(block) {
			words := shellSplit(step.command, vars)
			switch {
			case step.command == "go run ./cmd/orderly serve --data-dir /tmp/demo --roles api":
				hosts["localhost:8080"] = start1(server.Roles{API: true}) // no processor: orders stay pending
			case step.command == "go run ./cmd/orderly serve --data-dir /tmp/demo &":
				first = start1(server.DefaultRoles)
				hosts["localhost:8080"] = first
			case strings.HasPrefix(step.command, "go run ./cmd/orderly api ") && strings.Contains(step.command, "--http-addr 127.0.0.1:8081"):
				// An API process on the first one's NATS.
				cfg := orderlytest.Config(t)
				first.Attach(&cfg)
				cfg.OrderIDs, cfg.Roles = jsstore.OrderIDsKeyed, server.Roles{API: true}
				hosts["localhost:8081"] = orderlytest.Start(t, cfg)
			case step.command == "kill %1":
				first.Stop(t)
			case len(words) > 0 && words[0] == "curl":
				ran++
				runCurl(t, hosts, words[1:], files, step)
			case len(words) >= 3 && words[0] == "head" && words[1] == "-c":
				// head -c N /dev/zero | tr '\0' ' ' > F: N spaces in F.
				n, err := strconv.Atoi(words[2])
				if err != nil || !strings.Contains(step.command, "> ") {
					t.Fatalf("cannot follow %q", step.command)
				}
				name := strings.TrimSpace(step.command[strings.LastIndex(step.command, "> ")+2:])
				files[name] = bytes.Repeat([]byte(" "), n)
			default:
				t.Fatalf("cannot follow %q", step.command)
			}
		}
	}
	if ran < 11 {
		t.Fatalf("%d curl transcripts run: the extraction is broken", ran)
	}
}

type step struct {
	command string
	output  []string
}

// consoleBlocks returns the bodies of the ```console blocks of s.
func consoleBlocks(s string) []string {
	var out []string
	for _, part := range strings.Split(s, "```console\n")[1:] {
		if body, _, ok := strings.Cut(part, "\n```"); ok {
			out = append(out, body+"\n")
		}
	}
	return out
}

// transcriptSteps splits a transcript into its commands ($ lines, with their
// continuation lines) and the output printed after each.
func transcriptSteps(block string) []step {
	var steps []step
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
				i++
				cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(lines[i])
			}
			if c, _, ok := strings.Cut(cmd, " #"); ok {
				cmd = c
			}
			steps = append(steps, step{command: strings.TrimSpace(cmd)})
			continue
		}
		if len(steps) > 0 {
			steps[len(steps)-1].output = append(steps[len(steps)-1].output, line)
		}
	}
	return steps
}

// shellSplit splits a command line as a shell does for these transcripts:
// single quotes literal, double quotes with $NAME expanded from vars.
func shellSplit(s string, vars map[string]string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			cur.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			inner := s[i+1 : i+1+j]
			for name, v := range vars {
				inner = strings.ReplaceAll(inner, "$"+name, v)
			}
			cur.WriteString(inner)
			i, inWord = i+1+j, true
		case c == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// runCurl sends what curl -si would and compares the answer with the
// transcript's output.
func runCurl(t *testing.T, hosts map[string]*orderlytest.Instance, args []string, files map[string][]byte, s step) {
	t.Helper()
	var url string
	var body []byte
	var hasBody bool
	header := http.Header{}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-si":
		case "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			header.Add(k, strings.TrimSpace(v))
		case "-d", "--data-binary":
			i++
			hasBody = true
			if f, ok := strings.CutPrefix(args[i], "@"); ok {
				body = files[f]
			} else {
				body = []byte(args[i])
			}
		default:
			if strings.HasPrefix(a, "-") || url != "" {
				t.Fatalf("%s: curl argument %q not understood", s.command, a)
			}
			url = a
		}
	}
	method := http.MethodGet
	if hasBody {
		method = http.MethodPost
		if header.Get("Content-Type") == "" {
			header.Set("Content-Type", "application/x-www-form-urlencoded") // as curl -d sends it
		}
	}
	host, path, _ := strings.Cut(url, "/")
	inst, ok := hosts[host]
	if !ok {
		t.Fatalf("%s: nothing runs at %s", s.command, host)
	}
	req, err := http.NewRequest(method, inst.URL+"/"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", s.command, err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	if len(s.output) == 0 {
		t.Fatalf("%s: the transcript shows no answer", s.command)
	}
	status := strings.Fields(s.output[0])
	if len(status) < 2 || status[0] != "HTTP/1.1" || status[1] != strconv.Itoa(resp.StatusCode) {
		t.Errorf("%s: %d, the README shows %q", s.command, resp.StatusCode, s.output[0])
		return
	}
	i := 1
	for ; i < len(s.output) && s.output[i] != ""; i++ {
		k, v, _ := strings.Cut(s.output[i], ":")
		if k == "Content-Length" {
			continue
		}
		if g := resp.Header.Get(k); g != strings.TrimSpace(v) {
			t.Errorf("%s: %s: %q, the README shows %q", s.command, k, g, strings.TrimSpace(v))
		}
	}
	want := strings.TrimSpace(strings.Join(s.output[i:], "\n"))
	have := timestamp.ReplaceAllString(strings.TrimSpace(string(got)), "TIME")
	want = timestamp.ReplaceAllString(want, "TIME")
	if prefix, _, elided := strings.Cut(want, "..."); elided {
		if !strings.HasPrefix(have, prefix) {
			t.Errorf("%s: body %s, the README shows %s", s.command, have, want)
		}
		return
	}
	if have != want {
		t.Errorf("%s: body\n%s\nthe README shows\n%s", s.command, have, want)
	}
}
