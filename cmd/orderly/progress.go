package main

import (
	"fmt"
	"io"

	"github.com/schollz/progressbar/v3"

	"github.com/orderly-dev/orderly/internal/progress"
)

// newProgress starts the progress of total units of what on w: a bar on a
// terminal ("bytes" shows sizes on it), elsewhere the line "<what>: <done>
// of <total> <unit>" now and then and at the end (see internal/progress).
func newProgress(w io.Writer, what string, total int64, unit string) *progress.Bar {
	opts := []progressbar.Option{progressbar.OptionSetDescription(fmt.Sprintf("%-20s", what))}
	if unit == "bytes" {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionShowCount())
	}
	return progress.New(w, total, func(done, total int64) string {
		return fmt.Sprintf("%s: %d of %d %s", what, done, total, unit)
	}, opts...)
}
