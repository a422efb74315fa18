package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgressSaysLinesWhereNoTerminalIs: backup, restore and rebuild write
// plain lines to a log, at most one per interval and one at the end, and no
// bar frames.
func TestProgressSaysLinesWhereNoTerminalIs(t *testing.T) {
	old := progressEvery
	progressEvery = 30 * time.Millisecond
	t.Cleanup(func() { progressEvery = old })

	var out bytes.Buffer
	p := newProgress(&out, "ORDER_EVENTS", 1000, "bytes")
	for i := int64(1); i <= 100; i++ {
		p.set(i * 10)
		time.Sleep(time.Millisecond)
	}
	p.finish(true)

	got := out.String()
	if strings.ContainsAny(got, "\r\x1b") {
		t.Fatalf("bar frames where no terminal is:\n%q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) < 2 || len(lines) > 50 {
		t.Errorf("%d lines for 100 updates over about 100 ms at one per 30 ms, want a few, not one each:\n%s", len(lines), got)
	}
	if last := lines[len(lines)-1]; last != "ORDER_EVENTS: 1000 of 1000 bytes" {
		t.Errorf("last line %q, want the total", last)
	}

	out.Reset()
	p = newProgress(&out, "ORDER_COMMANDS", 1000, "bytes")
	p.set(400)
	p.finish(false)
	if got := out.String(); got != "ORDER_COMMANDS: 400 of 1000 bytes\n" {
		t.Errorf("a progress that failed ends with %q, want as far as it got", got)
	}
	out.Reset()
	p = newProgress(&out, "ORDER_COMMANDS", 1000, "bytes")
	p.set(980) // a snapshot's chunks fall short of the stream's bytes
	p.finish(true)
	if got := out.String(); got != "ORDER_COMMANDS: 1000 of 1000 bytes\n" {
		t.Errorf("a complete progress ends with %q, want all of it", got)
	}
}
