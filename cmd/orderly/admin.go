package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/admin"
	"github.com/orderly-dev/orderly/internal/progress"
	"github.com/orderly-dev/orderly/internal/termsafe"
)

// DLQCmd groups the dead-letter tools.
type DLQCmd struct {
	List   DLQListCmd   `cmd:"" help:"List the dead-lettered commands of ORDER_COMMANDS_DLQ: why each failed, its order and what the order is now."`
	Replay DLQReplayCmd `cmd:"" help:"Send dead-lettered commands to the processors again, under their original order IDs (once the cause is fixed). An order already decided stays decided: a replay never makes a second order. A replayed dead letter is deleted once its order is decided."`
}

// DLQListCmd is orderly dlq list.
type DLQListCmd struct {
	ToolNATS
	JSON bool `name:"json" help:"Print one JSON object per dead letter."`
}

// Run lists.
func (c *DLQListCmd) Run(g *globals) error {
	js, closeNC, err := c.connectJS("orderly-dlq")
	if err != nil {
		return err
	}
	defer closeNC()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	n := 0
	err = admin.DeadLetters(g.ctx, js, func(d admin.DeadLetter) error {
		n++
		if c.JSON {
			return printJSON(os.Stdout, d, false)
		}
		if n == 1 {
			fmt.Fprintln(tw, "SEQ\tDEAD-LETTERED\tORDER\tTENANT\tNOW\tREASON")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", d.Seq, d.Time.UTC().Format(time.RFC3339), safe(orNone(d.OrderID)), safe(orNone(d.Tenant)), safe(d.Decision), safe(d.Reason))
		return nil
	})
	_ = tw.Flush()
	if err != nil {
		return err
	}
	if n == 0 && !c.JSON {
		fmt.Fprintln(os.Stderr, "no dead letters")
	}
	return nil
}

// DLQReplayCmd is orderly dlq replay.
type DLQReplayCmd struct {
	ToolNATS
	Seqs []uint64      `arg:"" optional:"" name:"seq" help:"Sequences in ORDER_COMMANDS_DLQ (orderly dlq list shows them)."`
	All  bool          `name:"all" help:"Replay every dead letter."`
	Wait time.Duration `name:"wait" default:"30s" help:"How long to wait for each replayed order's decision (0: do not wait, and keep the dead letter)."`
	Keep bool          `name:"keep" help:"Keep the dead letters after their orders are decided."`
	JSON bool          `name:"json" help:"Print one JSON object per replay."`
}

// Run replays.
func (c *DLQReplayCmd) Run(g *globals) error {
	if c.All == (len(c.Seqs) > 0) {
		return errors.New("give the sequences to replay, or --all (not both)")
	}
	js, closeNC, err := c.connectJS("orderly-dlq")
	if err != nil {
		return err
	}
	defer closeNC()
	var todo []admin.DeadLetter
	if c.All {
		err = admin.DeadLetters(g.ctx, js, func(d admin.DeadLetter) error { todo = append(todo, d); return nil })
	} else {
		for _, seq := range c.Seqs {
			d, err := admin.DeadLetterAt(g.ctx, js, seq)
			if err != nil {
				return err
			}
			todo = append(todo, d)
		}
	}
	if err != nil {
		return err
	}
	failed := 0
	for i, d := range todo {
		fmt.Fprintf(os.Stderr, "[%d/%d] dead letter %d (order %s)\n", i+1, len(todo), d.Seq, safe(orNone(d.OrderID)))
		res, err := admin.Replay(g.ctx, js, d, admin.ReplayOptions{Wait: c.Wait, Keep: c.Keep || c.Wait == 0})
		if err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "  failed: %s\n", safe(err.Error()))
			continue
		}
		g.logger.Info("dead letter replayed", "seq", d.Seq, "order_id", d.OrderID, "outcome", res.Outcome, "decision", res.Decision,
			"deleted", res.Deleted, "by", operatorName())
		if c.JSON {
			_ = printJSON(os.Stdout, res, false)
		} else {
			fmt.Printf("%d\t%s\t%s\t%s\n", res.Seq, safe(orNone(res.OrderID)), safe(res.Decision), safe(res.Outcome))
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d replays failed", failed, len(todo))
	}
	return nil
}

// KeysCmd groups the idempotency-key tools.
type KeysCmd struct {
	Get   KeysGetCmd   `cmd:"" help:"Show what an idempotency key holds: pending or completed, its order, the request fingerprint, the stored response and when it expires."`
	Evict KeysEvictCmd `cmd:"" help:"Free a key stuck pending (its order will never be decided: its command was lost), so that the client's next request with it is processed as new. Refused for a key with a stored response, or whose order is decided or still waiting for a processor."`
}

// KeyArgs name a key.
type KeyArgs struct {
	Key    string `arg:"" help:"The idempotency key as the client sent it (its Idempotency-Key header's value, quoted or not), or its hash with --hash."`
	Tenant string `name:"tenant" default:"default" help:"The key's tenant (the tenant of the client's token; 'default' without tokens)."`
	Hash   bool   `name:"hash" help:"KEY is the key hash (idempotency_key_hash of an event, the key_hash of orderly dlq list), not the key."`
}

// hash is the key's hash. A key is read as the API reads its header, so
// the header's value may be pasted as it was sent ("abc" or abc;p=1 is the
// key abc), and a key or tenant the API would never have stored is refused
// rather than reported as unused.
func (k KeyArgs) hash() (string, error) {
	if k.Hash {
		return k.Key, nil
	}
	if !tenantOfTokensFile(k.Tenant) {
		return "", fmt.Errorf("tenant %q: a tenant is one word, as in a tokens file's 'tenant token' lines", k.Tenant)
	}
	key, kerr := api.ParseIdempotencyKey([]string{k.Key})
	if kerr != nil {
		return "", fmt.Errorf("%q is not a key the API accepts: %s", k.Key, kerr.Detail)
	}
	return idempotency.KeyHash(k.Tenant, key), nil
}

// lookUp connects as t and reads the key; close the connection with closeNC.
func (k KeyArgs) lookUp(g *globals, t ToolNATS) (js jetstream.JetStream, key admin.Key, closeNC func(), err error) {
	hash, err := k.hash()
	if err != nil {
		return nil, key, nil, err
	}
	js, closeNC, err = t.connectJS("orderly-keys")
	if err != nil {
		return nil, key, nil, err
	}
	key, err = admin.LookUp(g.ctx, js, hash)
	if err != nil {
		closeNC()
		return nil, key, nil, err
	}
	if !k.Hash {
		key.Tenant = k.Tenant
	}
	return js, key, closeNC, nil
}

// KeysGetCmd is orderly keys get.
type KeysGetCmd struct {
	ToolNATS
	KeyArgs
	JSON bool `name:"json" help:"Print the key as JSON."`
}

// Run shows a key.
func (c *KeysGetCmd) Run(g *globals) error {
	_, k, closeNC, err := c.lookUp(g, c.ToolNATS)
	if err != nil {
		return err
	}
	defer closeNC()
	if c.JSON {
		return printJSON(os.Stdout, k, true)
	}
	printKey(os.Stdout, k)
	return nil
}

func printKey(w io.Writer, k admin.Key) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "key hash:\t%s\n", k.KeyHash)
	if !k.Found {
		fmt.Fprintf(tw, "state:\tnone (never used, expired, or evicted): the next request with the key makes a new order\n")
		return
	}
	fmt.Fprintf(tw, "state:\t%s\n", safe(string(k.State)))
	if k.Source == events.EventStream {
		fmt.Fprintf(tw, "held by:\tthe order's event in %s (a keyed order: its event is its key's claim)\n", k.Source)
	}
	fmt.Fprintf(tw, "order:\t%s (%s)\n", safe(k.OrderID), safe(k.Decision))
	if k.Queued {
		fmt.Fprintf(tw, "\tits command waits for a processor\n")
	}
	fmt.Fprintf(tw, "fingerprint:\t%s\n", safe(k.Fingerprint))
	fmt.Fprintf(tw, "stored:\t%s\n", k.Stored.UTC().Format(time.RFC3339))
	if !k.Expires.IsZero() {
		fmt.Fprintf(tw, "expires:\t%s (in %s)\n", k.Expires.UTC().Format(time.RFC3339), time.Until(k.Expires).Round(time.Second))
	}
	if r := k.Response; r != nil {
		fmt.Fprintf(tw, "response:\t%d %s, Location %s\n", r.Status, safe(r.ContentType), safe(orNone(r.Location)))
		fmt.Fprintf(tw, "body:\t%s\n", safe(r.Body))
	}
}

// KeysEvictCmd is orderly keys evict.
type KeysEvictCmd struct {
	ToolNATS
	KeyArgs
	Yes bool `name:"yes" help:"Evict: without it, only show what would be evicted."`
}

// Run evicts a key.
func (c *KeysEvictCmd) Run(g *globals) error {
	js, k, closeNC, err := c.lookUp(g, c.ToolNATS)
	if err != nil {
		return err
	}
	defer closeNC()
	printKey(os.Stderr, k)
	if err := admin.Evictable(k); err != nil {
		return fmt.Errorf("not evicted: %w", err)
	}
	if !c.Yes {
		return errors.New("not evicted: run again with --yes to evict this key")
	}
	if err := admin.Evict(g.ctx, js, k); err != nil {
		return fmt.Errorf("not evicted: %w", err)
	}
	g.logger.Warn("idempotency key evicted: its next request makes a new order", "key_hash", k.KeyHash, "tenant", c.Tenant,
		"order_id", k.OrderID, "by", operatorName())
	return nil
}

func operatorName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "unknown"
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// BackupCmd is orderly backup.
type BackupCmd struct {
	ToolNATS
	Dir string `arg:"" type:"path" help:"New or empty directory for the backup (one subdirectory per stream, and orderly-backup.json); that of a backup that did not finish is reused."`
}

// Run backs up.
func (c *BackupCmd) Run(g *globals) error {
	if err := admin.CheckBackupDir(c.Dir); err != nil {
		return err // before NATS is asked anything
	}
	nc, err := c.dial("orderly-backup")
	if err != nil {
		return err
	}
	defer nc.Close()
	bars := newStreamBars()
	m, err := admin.Backup(g.ctx, nc, c.JSDomain, c.Dir, bars.update)
	bars.finish(err == nil)
	if err != nil {
		return err
	}
	for _, s := range m.Streams {
		fmt.Fprintf(os.Stderr, "%-20s %10d messages %12d bytes, sequences %d-%d\n", s.Name, s.Messages, s.Bytes, s.FirstSeq, s.LastSeq)
	}
	g.logger.Info("backup written", "dir", c.Dir, "taken", m.Taken)
	return nil
}

// RestoreCmd is orderly restore.
type RestoreCmd struct {
	ToolNATS
	Dir      string `arg:"" type:"path" help:"Directory of a backup made by orderly backup."`
	Replicas int    `name:"replicas" default:"0" help:"Replicas of each restored stream and its durable consumers. 0: those of orderly's streams already there (as orderly setup made them), else 1 on a single server and the backup's on a cluster."`
}

// Validate refuses a replica count NATS does not take.
func (c *RestoreCmd) Validate() error {
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("--replicas must be 0 (as the streams it replaces) or 1 to 5, got %d", c.Replicas)
	}
	return nil
}

// Run restores.
func (c *RestoreCmd) Run(g *globals) error {
	// A directory that is not a backup is refused before NATS is asked
	// anything (Restore reads it again, with everything else, first).
	if _, err := admin.ReadManifest(c.Dir); err != nil {
		return fmt.Errorf("%s: %w", c.Dir, err)
	}
	nc, err := c.dial("orderly-restore")
	if err != nil {
		return err
	}
	defer nc.Close()
	bars := newStreamBars()
	m, done, err := admin.Restore(g.ctx, nc, c.JSDomain, c.Dir, c.Replicas, bars.update)
	bars.finish(err == nil)
	for _, r := range done {
		what := "restored"
		if r.Kept {
			what = "kept: it held the backup's messages already"
		}
		fmt.Fprintf(os.Stderr, "%-20s %10d messages, %d replicas, %s\n", r.Stream, r.Messages, r.Replicas, what)
	}
	if err != nil {
		return err
	}
	g.logger.Info("backup restored; restart orderly's processes", "dir", c.Dir, "taken", m.Taken, "streams", len(m.Streams))
	return nil
}

// streamBars shows the progress of one stream after the other on stderr.
type streamBars struct {
	name string
	bar  *progress.Bar
}

func newStreamBars() *streamBars { return &streamBars{} }

func (b *streamBars) update(stream string, done, total uint64) {
	if stream != b.name {
		b.finish(true) // the streams go one after the other: the last one is done
		b.name = stream
		b.bar = newProgress(os.Stderr, stream, int64(total), "bytes")
	}
	b.bar.Set(int64(done))
}

func (b *streamBars) finish(complete bool) {
	if b.bar != nil {
		b.bar.Finish(complete)
		b.bar = nil
	}
}

// safe is s as it may be printed: what the tools print of dead letters,
// keys and events was written by other processes (termsafe).
func safe(s string) string { return termsafe.String(s) }

// printJSON writes v as one JSON document (indented or on one line), made
// safe for a terminal; it stays valid JSON with the same values. It is
// made safe while compact, where every character termsafe escapes stands
// inside a string, and indented after.
func printJSON(w io.Writer, v any, indent bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = []byte(termsafe.Bytes(b))
	if indent {
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		b = out.Bytes()
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
