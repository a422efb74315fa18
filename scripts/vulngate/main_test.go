package main

import (
	"bytes"
	"strings"
	"testing"
)

// The messages below are govulncheck v1.9.0's, cut short: a configuration,
// two database entries (the standard library's GO-2026-6809 as the database
// of 2026-11-05 has it, and a module's), and findings with and without a
// call from orderly's code.
const (
	config   = `{"config":{"protocol_version":"v1.0.0","scanner_name":"govulncheck","scanner_version":"v1.9.0","db":"file:///vulndb/data/osv","go_version":"go1.26.8","scan_level":"symbol","scan_mode":"source"}}`
	stdOSV   = `{"osv":{"id":"GO-2026-6809","summary":"Distrust compromised intermediate certificates in crypto/x509","affected":[{"package":{"name":"stdlib","ecosystem":"Go"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.26.10"},{"introduced":"1.27.0-0"},{"fixed":"1.27.3"}]}]}]}}`
	stdFound = `{"finding":{"osv":"GO-2026-6809","fixed_version":"v1.26.10","trace":[{"module":"stdlib","version":"v1.26.8","package":"crypto/x509","function":"Verify","receiver":"*Certificate","position":{"filename":"src/crypto/x509/verify.go","line":542}},{"module":"github.com/orderly-dev/orderly","package":"github.com/orderly-dev/orderly/internal/natsserver","function":"Start","position":{"filename":"internal/natsserver/natsserver.go","line":192}}]}}`
	modOSV   = `{"osv":{"id":"GO-2026-5676","summary":"HTTP/3 QPACK Trailer Expansion Memory Exhaustion","affected":[{"package":{"name":"github.com/quic-go/quic-go","ecosystem":"Go"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"0.59.1"}]}]}]}}`
	modFound = `{"finding":{"osv":"GO-2026-5676","fixed_version":"v0.59.1","trace":[{"module":"github.com/quic-go/quic-go","version":"v0.59.0","package":"github.com/quic-go/quic-go/http3","function":"Error","receiver":"*Error"},{"module":"github.com/orderly-dev/orderly","package":"github.com/orderly-dev/orderly/internal/pipeline","function":"DeadLetter","position":{"filename":"internal/pipeline/pipeline.go","line":479}}]}}`
	// A module's vulnerable package that is imported, no call reaching it.
	modImported = `{"finding":{"osv":"GO-2026-5932","fixed_version":"v0.58.1","trace":[{"module":"golang.org/x/crypto","version":"v0.58.0","package":"golang.org/x/crypto/ssh"}]}}`
)

func gate(t *testing.T, image string, lines ...string) (int, string) {
	t.Helper()
	s, err := read(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	return s.report(&out, image), out.String()
}

func TestStandardLibraryFindingsAreJudgedByTheImagesGo(t *testing.T) {
	for _, c := range []struct {
		image string
		fails bool
	}{
		{"1.26.8", true},
		{"1.26.9", true},
		{"1.26.10", false},
		{"1.26.11", false},
		{"1.27.0", true},
		{"1.27.2", true},
		{"1.27.3", false},
		{"1.28.0", false},
	} {
		failed, out := gate(t, c.image, config, stdOSV, stdFound, stdFound)
		if (failed == 1) != c.fails || failed > 1 {
			t.Errorf("image Go %s: %d failed, want failing %v\n%s", c.image, failed, c.fails, out)
		}
		if !strings.Contains(out, "crypto/x509.Certificate.Verify, reached from internal/natsserver/natsserver.go:192") {
			t.Errorf("the report does not say where the code reaches it:\n%s", out)
		}
	}
}

func TestTheReportIsTheSameWhateverTheOrderOfTraces(t *testing.T) {
	other := strings.NewReplacer("Verify", "VerifyHostname", "natsserver.go", "child.go").Replace(stdFound)
	_, one := gate(t, "1.26.10", config, stdOSV, stdFound, other)
	_, two := gate(t, "1.26.10", config, stdOSV, other, stdFound)
	if one != two {
		t.Errorf("the order of the traces changed the report:\n%s\n%s", one, two)
	}
}

func TestAModuleFindingThatIsCalledFails(t *testing.T) {
	failed, out := gate(t, "1.27.3", config, modOSV, modFound, modImported)
	if failed != 1 || !strings.Contains(out, "github.com/quic-go/quic-go@v0.59.0 is in go.mod; fixed in v0.59.1") {
		t.Errorf("%d failed:\n%s", failed, out)
	}
	if !strings.Contains(out, "1 more in imported packages or required modules") {
		t.Errorf("the finding without a call is not counted:\n%s", out)
	}
}

func TestFindingsWithoutACallPass(t *testing.T) {
	failed, out := gate(t, "1.26.8", config, modImported)
	if failed != 0 || !strings.Contains(out, "no known vulnerability is reached") {
		t.Errorf("%d failed:\n%s", failed, out)
	}
}

func TestAFindingWithoutItsEntryFails(t *testing.T) {
	if failed, out := gate(t, "1.27.3", config, stdFound); failed != 1 {
		t.Errorf("%d failed:\n%s", failed, out)
	}
}

func TestAnIncompleteScanIsRefused(t *testing.T) {
	for name, in := range map[string]string{
		"empty":         "",
		"no config":     stdOSV + stdFound,
		"package level": strings.Replace(config, `"symbol"`, `"package"`, 1),
		"cut short":     config + `{"osv":{"id":`,
		"plain text":    "Your code is affected by 1 vulnerability",
	} {
		if _, err := read(strings.NewReader(in)); err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
}

func TestImageGo(t *testing.T) {
	for df, want := range map[string]string{
		"FROM golang:1.26.10-bookworm AS build\nFROM gcr.io/distroless/static-debian12:nonroot": "1.26.10",
		"from docker.io/library/golang:1.27.3 as build":                                         "1.27.3",
	} {
		if got, err := imageGo(df); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", df, got, err, want)
		}
	}
	for _, df := range []string{
		"FROM debian:bookworm",
		"FROM golang:1.26-bookworm",
		"FROM golang:1.26.10\nFROM golang:1.27.3",
	} {
		if got, err := imageGo(df); err == nil {
			t.Errorf("%q: %q without an error", df, got)
		}
	}
}

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"1.26.10", "1.26.9", 1},
		{"1.26.8", "v1.26.8", 0},
		{"go1.27.0", "1.27.0-0", 1},
		{"1.26.10", "1.27.0-0", -1},
		{"1.26.8", "0", 1},
		{"1.27", "1.27.0", 0},
	} {
		if got := compare(c.a, c.b); got != c.want {
			t.Errorf("compare(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
