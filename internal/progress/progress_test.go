package progress

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func line(done, total int64) string { return fmt.Sprintf("stream: %d of %d bytes", done, total) }

// TestLinesWhereNoTerminalIs: a log file or a CI job gets a plain line at
// most every Every and one at the end, never a bar's frames.
func TestLinesWhereNoTerminalIs(t *testing.T) {
	old := Every
	Every = 30 * time.Millisecond
	t.Cleanup(func() { Every = old })

	var out bytes.Buffer
	b := New(&out, 1000, line)
	if b.Terminal() {
		t.Fatal("a buffer taken for a terminal")
	}
	for i := int64(1); i <= 100; i++ {
		b.Set(i * 10)
		time.Sleep(time.Millisecond)
	}
	b.Finish(true)

	got := out.String()
	if strings.ContainsAny(got, "\r\x1b") {
		t.Fatalf("bar frames where no terminal is:\n%q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) < 2 || len(lines) > 50 {
		t.Errorf("%d lines for 100 updates over about 100 ms at one per 30 ms, want a few, not one each:\n%s", len(lines), got)
	}
	for i := 1; i < len(lines); i++ {
		var prev, cur int64
		fmt.Sscanf(lines[i-1], "stream: %d", &prev)
		fmt.Sscanf(lines[i], "stream: %d", &cur)
		if cur < prev {
			t.Errorf("line %d went back from %d to %d", i, prev, cur)
		}
	}
	if last := lines[len(lines)-1]; last != "stream: 1000 of 1000 bytes" {
		t.Errorf("last line %q, want the total", last)
	}
}

// TestSetEveryChangesThePace: SetEvery gives one Bar its own interval
// between plain lines, shorter or longer than Every; a zero or negative one
// leaves it as it was.
func TestSetEveryChangesThePace(t *testing.T) {
	count := func(every time.Duration) int {
		var out bytes.Buffer
		b := New(&out, 1000, line)
		b.SetEvery(every)
		for i := int64(1); i <= 100; i++ {
			b.Set(i * 10)
			time.Sleep(time.Millisecond)
		}
		b.Finish(true)
		return strings.Count(out.String(), "\n")
	}
	// About 100 ms of updates: Every (5 s) writes the last line alone.
	if n := count(0); n != 1 {
		t.Errorf("SetEvery(0): %d lines, want Every's pace (the last line alone)", n)
	}
	if n := count(10 * time.Millisecond); n < 4 {
		t.Errorf("SetEvery(10ms): %d lines in about 100 ms, want several", n)
	}
	if n := count(time.Hour); n != 1 {
		t.Errorf("SetEvery(1h): %d lines, want the last alone", n)
	}
}

// TestFinishDoesNotRepeatTheLastLine: work that ends where its last plain
// line left it ends without that line again.
func TestFinishDoesNotRepeatTheLastLine(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, 1000, line)
	b.SetEvery(time.Nanosecond)
	b.Set(1000)
	b.Finish(true)
	if got, want := out.String(), "stream: 1000 of 1000 bytes\n"; got != want {
		t.Errorf("got %q, want the line once: %q", got, want)
	}
}

// TestFinishSaysHowFarItGot: a failed piece of work ends where it stopped,
// a complete one at its total even when its units fell short (a
// snapshot's compressed chunks against the stream's bytes), and what is
// set stays within 0 and the total.
func TestFinishSaysHowFarItGot(t *testing.T) {
	for _, c := range []struct {
		name     string
		set      int64
		complete bool
		want     string
	}{
		{"failed", 400, false, "stream: 400 of 1000 bytes\n"},
		{"complete, short", 980, true, "stream: 1000 of 1000 bytes\n"},
		{"past the total", 1500, false, "stream: 1000 of 1000 bytes\n"},
		{"below zero", -5, false, "stream: 0 of 1000 bytes\n"},
	} {
		var out bytes.Buffer
		b := New(&out, 1000, line)
		b.Set(c.set)
		b.Describe("ignored where no terminal is")
		b.Finish(c.complete)
		if got := out.String(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestIsTerminal: files and buffers are not terminals.
func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) {
		t.Error("a file or a buffer taken for a terminal")
	}
}
