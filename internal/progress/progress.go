// Package progress shows how far a long command is (a backup, a restore, a
// rebuild, a load run): a bar redrawn in place on a terminal; anywhere else
// (a log file, a CI job), where a redrawn bar would fill the file with
// frames, a plain line at most every Every and one at the end.
//
// It writes to the writer it is given and nothing else; it must not import
// anything of orderly's.
package progress

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Every is how often a Bar writes a plain line where its writer is not a
// terminal.
var Every = 5 * time.Second

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// Bar is the progress of one piece of work of total units. Its methods
// are called from one goroutine.
type Bar struct {
	bar   *progressbar.ProgressBar // nil where w is not a terminal
	w     io.Writer
	line  func(done, total int64) string
	total int64
	done  int64
	said  time.Time // the last plain line
	drawn time.Time // the last bar set on a terminal
	every time.Duration
	last  string // the last plain line
}

// redraw is how often a Bar redraws its bar on a terminal at most, but for
// its last state, which is always drawn.
const redraw = 200 * time.Millisecond

// New starts a Bar of total units on w. line renders the plain line (no
// newline) of done units of total; opts shape the bar on a terminal, which
// is redrawn at most five times a second, and at the end.
func New(w io.Writer, total int64, line func(done, total int64) string, opts ...progressbar.Option) *Bar {
	b := &Bar{w: w, line: line, total: max(total, 0), said: time.Now(), every: Every}
	if IsTerminal(w) {
		opts = append([]progressbar.Option{progressbar.OptionSetWriter(w)}, opts...)
		b.bar = progressbar.NewOptions64(max(total, 1), opts...)
	}
	return b
}

// SetEvery makes b write a plain line at most every d (d > 0) instead of
// Every where its writer is not a terminal; a bar is redrawn as before.
func (b *Bar) SetEvery(d time.Duration) {
	if d > 0 {
		b.every = d
	}
}

// Terminal reports whether b draws a bar (else it writes plain lines).
func (b *Bar) Terminal() bool { return b.bar != nil }

// Set records that done units are done (at most total).
func (b *Bar) Set(done int64) {
	b.done = min(max(done, 0), b.total)
	if b.bar != nil {
		// The throttle is this one, not the bar's own, which would skip
		// the last state too when it comes soon after another.
		if time.Since(b.drawn) >= redraw {
			b.drawn = time.Now()
			_ = b.bar.Set64(b.done)
		}
		return
	}
	if time.Since(b.said) >= b.every {
		b.say()
	}
}

// Describe sets the text the bar shows beside it on a terminal; plain lines
// are line's alone.
func (b *Bar) Describe(s string) {
	if b.bar != nil {
		b.bar.Describe(s)
	}
}

// Finish ends b with its last state on a line of its own: complete shows it
// all done (a snapshot's compressed chunks, say, do not add up to the
// stream's bytes), else as far as it got.
func (b *Bar) Finish(complete bool) {
	if complete {
		b.done = b.total
	}
	if b.bar == nil {
		if b.line(b.done, b.total) != b.last {
			b.say() // not the line just written again
		}
		return
	}
	if complete {
		_ = b.bar.Finish()
	} else {
		_ = b.bar.Set64(b.done)
		_ = b.bar.Exit()
	}
	fmt.Fprintln(b.w)
}

func (b *Bar) say() {
	b.said, b.last = time.Now(), b.line(b.done, b.total)
	fmt.Fprintln(b.w, b.last)
}
