package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/orderly-dev/orderly/internal/bench"
)

// progressEvery is how often a progress writes a line where its writer is
// not a terminal.
var progressEvery = 5 * time.Second

// progress shows how far a long command is: a bar redrawn in place on a
// terminal; elsewhere (a log file, a CI job) a line at most every
// progressEvery and one at the end, "<what>: <done> of <total> <unit>".
type progress struct {
	bar   *progressbar.ProgressBar // nil where w is not a terminal
	w     io.Writer
	what  string
	unit  string
	total int64
	done  int64
	said  time.Time
}

// newProgress starts a progress of total units ("bytes" shows sizes on the
// bar) of what on w.
func newProgress(w io.Writer, what string, total int64, unit string) *progress {
	p := &progress{w: w, what: what, unit: unit, total: total, said: time.Now()}
	if bench.IsTerminal(w) {
		opts := []progressbar.Option{progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(fmt.Sprintf("%-20s", what)),
			progressbar.OptionThrottle(200 * time.Millisecond)}
		if unit == "bytes" {
			opts = append(opts, progressbar.OptionShowBytes(true))
		} else {
			opts = append(opts, progressbar.OptionShowCount())
		}
		p.bar = progressbar.NewOptions64(max(total, 1), opts...)
	}
	return p
}

func (p *progress) set(done int64) {
	p.done = min(done, p.total)
	if p.bar != nil {
		_ = p.bar.Set64(p.done)
		return
	}
	if time.Since(p.said) >= progressEvery {
		p.say()
	}
}

// finish ends the progress: complete shows it all done (a snapshot's
// compressed chunks do not add up to the stream's bytes), else as far as it
// got.
func (p *progress) finish(complete bool) {
	if complete {
		p.done = p.total
	}
	if p.bar != nil {
		if complete {
			_ = p.bar.Finish()
		} else {
			_ = p.bar.Exit()
		}
		fmt.Fprintln(p.w)
		return
	}
	p.say()
}

func (p *progress) say() {
	p.said = time.Now()
	fmt.Fprintf(p.w, "%s: %d of %d %s\n", p.what, p.done, p.total, p.unit)
}
