// Command vulngate decides whether the known vulnerabilities that orderly's
// code reaches are fixed in what is deployed. It reads govulncheck's JSON
// stream (`govulncheck -format json ./...`) on stdin; scripts/vulncheck.sh
// runs it.
//
//   - A vulnerability of a module that the code calls fails the gate: bump
//     the module (go get module@fixed) to a fixed version.
//   - One of the standard library is fixed by the Go release that builds the
//     image: it fails the gate only when the Dockerfile's golang image is
//     still affected. The Go of the machine that runs the scan may be older
//     (go.mod's go line is a minimum); what it builds carries them, and the
//     report says so.
//
// Findings in imported packages or required modules that no call reaches
// are counted, not gated (govulncheck's own exit status makes the same
// distinction).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	dockerfile := flag.String("dockerfile", "Dockerfile", "the Dockerfile whose golang build image is checked against the standard library's findings")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: govulncheck -format json ./... | vulngate [-dockerfile Dockerfile]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	df, err := os.ReadFile(*dockerfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulngate:", err)
		os.Exit(2)
	}
	image, err := imageGo(string(df))
	if err != nil {
		fmt.Fprintf(os.Stderr, "vulngate: %s: %v\n", *dockerfile, err)
		os.Exit(2)
	}
	scan, err := read(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulngate:", err)
		os.Exit(2)
	}
	if failed := scan.report(os.Stdout, image); failed > 0 {
		fmt.Printf("\n%d of the reached vulnerabilities not fixed where orderly is deployed\n", failed)
		os.Exit(1)
	}
}

// The parts of govulncheck's JSON protocol (golang.org/x/vuln/scan) read here.
type message struct {
	Config *struct {
		ScannerVersion string `json:"scanner_version"`
		DB             string `json:"db"`
		GoVersion      string `json:"go_version"`
		ScanLevel      string `json:"scan_level"`
	} `json:"config"`
	OSV     *osvEntry `json:"osv"`
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

type osvEntry struct {
	ID       string `json:"id"`
	Summary  string `json:"summary"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []struct {
			Events []struct {
				Introduced string `json:"introduced"`
				Fixed      string `json:"fixed"`
			} `json:"events"`
		} `json:"ranges"`
	} `json:"affected"`
}

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
	Position *struct {
		Filename string `json:"filename"`
		Line     int    `json:"line"`
	} `json:"position"`
}

// finding is one vulnerability the code reaches: where, and from which of
// orderly's lines (one of its traces).
type finding struct {
	id, module, version, fixed string
	symbol, from               string
}

type scan struct {
	goVersion, db string
	osv           map[string]*osvEntry
	called        map[string]*finding
	notCalled     map[string]bool
}

const stdlib = "stdlib"

// read takes the whole stream; it fails when the stream is not a complete
// symbol-level scan (a govulncheck that stopped early must not pass).
func read(r io.Reader) (*scan, error) {
	s := &scan{osv: map[string]*osvEntry{}, called: map[string]*finding{}, notCalled: map[string]bool{}}
	dec := json.NewDecoder(r)
	configured := false
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		switch {
		case m.Config != nil:
			if m.Config.ScanLevel != "symbol" {
				return nil, fmt.Errorf("govulncheck scanned at %q level; the gate needs -scan symbol (the default)", m.Config.ScanLevel)
			}
			configured = true
			s.goVersion, s.db = m.Config.GoVersion, m.Config.DB
		case m.OSV != nil:
			s.osv[m.OSV.ID] = m.OSV
		case m.Finding != nil:
			f := m.Finding
			if len(f.Trace) == 0 {
				return nil, fmt.Errorf("finding %s has no trace", f.OSV)
			}
			top := f.Trace[0]
			if top.Function == "" {
				s.notCalled[f.OSV] = true
				continue
			}
			// govulncheck reports a trace per reached symbol, in no fixed
			// order: the report names the least of them, so that two runs
			// of one commit print the same.
			next := &finding{id: f.OSV, module: top.Module, version: top.Version, fixed: f.FixedVersion,
				symbol: symbol(top), from: position(f.Trace[len(f.Trace)-1])}
			if seen, ok := s.called[f.OSV]; !ok || next.symbol+" "+next.from < seen.symbol+" "+seen.from {
				s.called[f.OSV] = next
			}
		}
	}
	if !configured {
		return nil, errors.New("no govulncheck configuration in the input: did govulncheck run with -format json?")
	}
	for id := range s.called {
		delete(s.notCalled, id)
	}
	return s, nil
}

func symbol(f frame) string {
	name := f.Function
	if f.Receiver != "" {
		name = strings.TrimPrefix(f.Receiver, "*") + "." + name
	}
	return f.Package + "." + name
}

func position(f frame) string {
	if f.Position == nil {
		return symbol(f)
	}
	return f.Position.Filename + ":" + strconv.Itoa(f.Position.Line)
}

// report prints every reached vulnerability and returns how many are not
// fixed in the deployed build (image: the Go version of its build image).
func (s *scan) report(w io.Writer, image string) (failed int) {
	fmt.Fprintf(w, "govulncheck with %s, database %s\n", s.goVersion, s.db)
	fmt.Fprintf(w, "the image is built with Go %s (Dockerfile)\n\n", image)
	ids := make([]string, 0, len(s.called))
	for id := range s.called {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		f := s.called[id]
		summary := ""
		if e := s.osv[id]; e != nil {
			summary = e.Summary
		}
		verdict := ""
		switch {
		case f.module != stdlib:
			verdict = fmt.Sprintf("NOT FIXED: %s@%s is in go.mod; fixed in %s", f.module, f.version, orNone(f.fixed))
			failed++
		case s.osv[id] == nil:
			verdict = "NOT FIXED: the database sent no entry for it, so the image's Go cannot be checked"
			failed++
		case stdlibAffected(s.osv[id], image):
			verdict = fmt.Sprintf("NOT FIXED in the image: Go %s is affected", image)
			failed++
		default:
			verdict = fmt.Sprintf("fixed in the image (Go %s); builds with %s carry it (fixed in %s)", image, s.goVersion, orNone(f.fixed))
		}
		fmt.Fprintf(w, "%s  %s\n    %s, reached from %s\n    %s\n", id, summary, f.symbol, f.from, verdict)
	}
	if len(ids) == 0 {
		fmt.Fprintln(w, "no known vulnerability is reached by orderly's code")
	}
	if n := len(s.notCalled); n > 0 {
		fmt.Fprintf(w, "\n%d more in imported packages or required modules, with no call from orderly's code (govulncheck -show verbose lists them)\n", n)
	}
	return failed
}

func orNone(v string) string {
	if v == "" {
		return "no release yet"
	}
	return v
}

// stdlibAffected tells whether Go version v (1.26.10) is in one of e's
// affected ranges of the standard library. A range without a fix affects
// every version from its introduction.
func stdlibAffected(e *osvEntry, v string) bool {
	for _, a := range e.Affected {
		if a.Package.Name != stdlib {
			continue
		}
		for _, r := range a.Ranges {
			in := false
			for _, ev := range r.Events {
				switch {
				case ev.Introduced != "":
					if compare(v, ev.Introduced) >= 0 {
						in = true
					}
				case ev.Fixed != "":
					if in && compare(v, ev.Fixed) < 0 {
						return true
					}
					in = false
				}
			}
			if in {
				return true
			}
		}
	}
	return false
}

// compare orders Go versions as the vulnerability database writes them:
// 1.26.10, 1.27.0-0 (before any 1.27 release), 0 (before everything).
// Missing parts are 0; a pre-release comes before its release.
func compare(a, b string) int {
	an, apre := split(a)
	bn, bpre := split(b)
	for i := range 3 {
		if c := an[i] - bn[i]; c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
	}
	switch {
	case apre == bpre:
		return 0
	case apre == "":
		return 1
	case bpre == "":
		return -1
	}
	return strings.Compare(apre, bpre)
}

func split(v string) (num [3]int, pre string) {
	v = strings.TrimPrefix(strings.TrimPrefix(v, "v"), "go")
	v, pre, _ = strings.Cut(v, "-")
	for i, p := range strings.SplitN(v, ".", 3) {
		num[i], _ = strconv.Atoi(p)
	}
	return num, pre
}

var fromGolang = regexp.MustCompile(`(?mi)^FROM\s+(?:\S+/)?golang:(\d+\.\d+(?:\.\d+)?)\S*`)

// imageGo is the Go version of the Dockerfile's golang build image; it must
// name a patch release, or the version built with is not known.
func imageGo(dockerfile string) (string, error) {
	m := fromGolang.FindAllStringSubmatch(dockerfile, -1)
	switch {
	case len(m) == 0:
		return "", errors.New("no FROM golang:<version> line")
	case len(m) > 1:
		return "", errors.New("more than one FROM golang:<version> line")
	case strings.Count(m[0][1], ".") != 2:
		return "", fmt.Errorf("golang:%s names no patch release; pin one (golang:1.26.10-bookworm)", m[0][1])
	}
	return m[0][1], nil
}
