package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// StatusCmd is orderly status.
type StatusCmd struct {
	ToolNATS
	Leader string `name:"leader" placeholder:"STREAM" help:"Print only the server that leads STREAM (ORDER_COMMANDS, ORDER_EVENTS, ORDER_COMMANDS_DLQ or KV_ORDER_RESULTS), for scripts."`
	JSON   bool   `name:"json" help:"Print the streams' status as JSON (exact counts; the table rounds bytes to KiB, MiB or GiB, and ends with the account's storage, which /metrics has exactly: orderly_account_store_bytes)."`
}

// streamStatus is one stream's line.
type streamStatus struct {
	Stream    string   `json:"stream"`
	Messages  uint64   `json:"messages"`
	Bytes     uint64   `json:"bytes"`
	Replicas  int      `json:"replicas"`
	Leader    string   `json:"leader,omitempty"`
	Lagging   []string `json:"lagging,omitempty"`
	Offline   []string `json:"offline,omitempty"`
	Consumer  string   `json:"consumer,omitempty"`
	Pending   uint64   `json:"pending,omitempty"`
	InFlight  int      `json:"in_flight,omitempty"`
	Redeliver int      `json:"redelivered,omitempty"`
	// OrderIDs is the form of new orders' IDs stored with ORDER_COMMANDS
	// (keyed or nonce: ADR 0010), on that stream's line.
	OrderIDs string `json:"order_ids,omitempty"`
	// Missing is set for a stream that does not exist.
	Missing bool `json:"missing,omitempty"`
}

// Run prints the streams' state.
func (c *StatusCmd) Run(g *globals) error {
	js, closeNC, err := c.connectJS("orderly-status")
	if err != nil {
		return err
	}
	defer closeNC()
	consumers := map[string]string{events.CommandStream: jsstore.ProcessorConsumer, events.EventStream: jsstore.ProjectorConsumer}
	var out []streamStatus
	for _, name := range []string{events.CommandStream, events.EventStream, events.DeadLetterStream, jsstore.ResultsStream} {
		s, err := js.Stream(g.ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) && name != c.Leader {
			// shown with the others; status then fails
			out = append(out, streamStatus{Stream: name, Missing: true})
			continue
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		info := s.CachedInfo()
		st := streamStatus{Stream: name, Messages: info.State.Msgs, Bytes: info.State.Bytes, Replicas: info.Config.Replicas}
		if name == events.CommandStream {
			st.OrderIDs = jsstore.OrderIDsOf(info.Config)
		}
		if cl := info.Cluster; cl != nil {
			st.Leader = cl.Leader
			for _, p := range cl.Replicas {
				switch {
				case p.Offline:
					st.Offline = append(st.Offline, p.Name)
				case !p.Current:
					st.Lagging = append(st.Lagging, p.Name)
				}
			}
		}
		if name == c.Leader {
			if st.Leader == "" {
				return fmt.Errorf("%s has no leader now (a single server, or an election)", name)
			}
			fmt.Println(st.Leader)
			return nil
		}
		if durable, ok := consumers[name]; ok {
			cons, err := s.Consumer(g.ctx, durable)
			if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return err
			}
			if err == nil {
				ci := cons.CachedInfo()
				st.Consumer, st.Pending, st.InFlight, st.Redeliver = durable, ci.NumPending, ci.NumAckPending, ci.NumRedelivered
			}
		}
		out = append(out, st)
	}
	if c.Leader != "" {
		return fmt.Errorf("unknown stream %q", c.Leader)
	}
	var missing []string
	for _, st := range out {
		if st.Missing {
			missing = append(missing, st.Stream)
		}
	}
	if err := printStatus(out, c.JSON); err != nil {
		return err
	}
	if !c.JSON {
		printAccountStore(g.ctx, js)
	}
	if len(missing) > 0 {
		hint := ""
		if len(missing) == len(out) {
			hint = jsstore.DomainHint(g.ctx, js)
		}
		return fmt.Errorf("missing: %s (orderly setup creates a missing stream; orderly restore puts back a backup's)%s", strings.Join(missing, ", "), hint)
	}
	return nil
}

// printStatus prints the streams' lines as a table, or as JSON.
func printStatus(out []streamStatus, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tMESSAGES\tBYTES\tREPLICAS\tLEADER\tNOT CURRENT\tCONSUMER\tPENDING\tIN FLIGHT\tREDELIVERED")
	for _, st := range out {
		if st.Missing {
			fmt.Fprintf(tw, "%s\tmissing\t-\t-\t-\t-\t-\t-\t-\t-\n", st.Stream)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\n", st.Stream, humanize.Comma(int64(st.Messages)), humanize.IBytes(st.Bytes), st.Replicas, orNone(st.Leader),
			orNone(strings.Join(append(st.Lagging, st.Offline...), ",")), orNone(st.Consumer), humanize.Comma(int64(st.Pending)), st.InFlight, st.Redeliver)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, st := range out {
		if st.OrderIDs != "" {
			fmt.Printf("\norder IDs of new orders: %s (stored with %s; APIs with --order-ids auto follow it; orderly setup --order-ids changes it)\n", st.OrderIDs, st.Stream)
		}
	}
	return nil
}

// printAccountStore prints the JetStream storage orderly's account uses
// against its limit (ADR 0032), or nothing when NATS does not say.
func printAccountStore(ctx context.Context, js jetstream.JetStream) {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return
	}
	fmt.Print("\n" + accountStorageLine(info))
}

// accountStorageLine says what the account stores against its limit, or
// its tier's when its limits are tiered.
func accountStorageLine(info *jetstream.AccountInfo) string {
	s := jsstore.AccountStorage(info)
	limit := "no limit (orderly credentials init --account-max-store sets one)"
	switch {
	case s.Tier != "":
		limit = fmt.Sprintf("of which its %s streams (tier %s) %s of the tier's limit of %s (%.0f%%; at it new orders are refused)",
			s.Tier, s.Tier, humanize.IBytes(s.Used), humanize.IBytes(uint64(s.Limit)), 100*float64(s.Used)/float64(s.Limit))
	case s.Limit > 0:
		limit = fmt.Sprintf("of a limit of %s (%.0f%%; at it new orders are refused)", humanize.IBytes(uint64(s.Limit)), 100*float64(s.Used)/float64(s.Limit))
	}
	return fmt.Sprintf("account storage: %s in JetStream, every copy counted, %s\n", humanize.IBytes(info.Store), limit)
}
