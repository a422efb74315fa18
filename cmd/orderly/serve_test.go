package main

import (
	"io"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestBatchWritesFollowFsync: writes are grouped into atomic batches (group
// commit) by default exactly when every write is synced, unless set.
func TestBatchWritesFollowFsync(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]bool{
		"serve":                false,
		"serve --fsync 1s":     false,
		"serve --fsync always": true,
		"serve --fsync always --batch-writes off": false,
		"serve --batch-writes on":                 true,
	} {
		var cli CLI
		parser, err := kong.New(&cli, kong.Name("orderly"), kong.Exit(func(int) { t.Fatalf("%s: exit", args) }), kong.Writers(io.Discard, io.Discard))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parser.Parse(strings.Fields(args)); err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		cfg, err := cli.Serve.config()
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		if cfg.BatchWrites != want {
			t.Errorf("%s: batch writes %v, want %v", args, cfg.BatchWrites, want)
		}
	}
}
