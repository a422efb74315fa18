package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/progress"
	"github.com/orderly-dev/orderly/projections"
)

// ProjectionsCmd groups the read-model tools.
type ProjectionsCmd struct {
	Rebuild RebuildCmd `cmd:"" help:"Recompute ORDER_RESULTS from ORDER_EVENTS: write what is missing or different, remove what no event calls for. Keyed orders are answered from their events and need no record. Safe while orderly runs."`
}

// RebuildCmd is orderly projections rebuild.
type RebuildCmd struct {
	ToolNATS
	DryRun bool `name:"dry-run" help:"Only compare: report the differences, change nothing. Exits 1 when the read models differ."`
	JSON   bool `name:"json" help:"Print the report as JSON."`
}

// Run rebuilds.
func (c *RebuildCmd) Run(g *globals) error {
	js, closeNC, err := c.connectJS("orderly-rebuild")
	if err != nil {
		return err
	}
	defer closeNC()
	results, err := jsstore.OpenResults(g.ctx, js, js)
	if err != nil {
		return err
	}
	evs, err := jsstore.OpenEvents(g.ctx, js, js)
	if err != nil {
		return err
	}
	var bar *progress.Bar
	rep, err := projections.Rebuild(g.ctx, results, evs, results.TTL(), projections.RebuildOptions{
		DryRun: c.DryRun, MaxDifferences: 20,
		Progress: func(done, total uint64) {
			if bar == nil {
				bar = newProgress(os.Stderr, "events", int64(total), "events")
			}
			bar.Set(int64(done))
		},
	})
	if bar != nil {
		bar.Finish(err == nil)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Printf("events read:        %d\n", rep.Events)
		fmt.Printf("results called for: %d\n", rep.Results)
		fmt.Printf("keyed orders:       %d (answered from their events)\n", rep.Keyed)
		if rep.Unreadable > 0 {
			fmt.Printf("unreadable events:  %d (skipped, as the projector skips them)\n", rep.Unreadable)
		}
		fmt.Printf("missing:            %d\ndifferent:          %d\nstale:              %d\n", rep.Missing, rep.Different, rep.Stale)
		if !c.DryRun {
			fmt.Printf("written:            %d\nremoved:            %d\n", rep.Written, rep.Removed)
		}
		for _, d := range rep.Differences {
			fmt.Println("  ", safe(d)) // an unreadable event's error quotes it
		}
	}
	if c.DryRun && !rep.Equal() {
		return errors.New("the read models differ from the events")
	}
	return nil
}
