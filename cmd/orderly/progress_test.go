package main

import (
	"bytes"
	"testing"
)

// TestProgressLine: backup, restore and rebuild say "<what>: <done> of
// <total> <unit>" where no terminal is (internal/progress says when).
func TestProgressLine(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, "ORDER_COMMANDS", 1000, "bytes")
	p.Set(400)
	p.Finish(false)
	if got := out.String(); got != "ORDER_COMMANDS: 400 of 1000 bytes\n" {
		t.Errorf("%q, want as far as it got", got)
	}
}
