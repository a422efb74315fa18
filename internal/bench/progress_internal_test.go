package bench

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestProgressWritesLinesWhereNoTerminalIs: a log file or a CI job gets a
// line now and then, not a bar redrawn with carriage returns.
func TestProgressWritesLinesWhereNoTerminalIs(t *testing.T) {
	old := plainEvery
	plainEvery = 20 * time.Millisecond
	t.Cleanup(func() { plainEvery = old })

	var out bytes.Buffer
	var n atomic.Int64
	start := time.Now()
	stop := Progress(&out, start, 0, 100, n.Load, func(n int64, _ time.Time) string {
		return fmt.Sprintf("%9d requests", n)
	})
	for range 10 {
		n.Add(10)
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	got := out.String()
	if strings.ContainsAny(got, "\r\x1b") {
		t.Fatalf("carriage returns or escapes where no terminal is:\n%q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	want := regexp.MustCompile(`^ +\d+s +\d+% \d+ requests$`)
	for _, l := range lines {
		if !want.MatchString(l) {
			t.Errorf("line %q, want the time, the share done and the label", l)
		}
	}
	if len(lines) < 2 || !strings.HasSuffix(lines[len(lines)-1], "s 100% 100 requests") {
		t.Errorf("%d lines, the last %q; want several, the last at 100%%:\n%s", len(lines), lines[len(lines)-1], got)
	}
}
