package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	jsm "github.com/nats-io/jsm.go"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/jsm.go/backup"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/admin"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

func operatorConn(t *testing.T, url string, creds natsauth.Credentials) *nats.Conn {
	t.Helper()
	key, err := nats.NkeyOptionFromSeed(creds.SeedPath(natsauth.Operator))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestBackupRestoreDrill: back up a running orderly, lose its NATS with all
// its data, restore the backup into a new NATS, start orderly again: every
// key's retry replays the very bytes it was answered before, every order
// reads the same, and new orders get new IDs.
func TestBackupRestoreDrill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	creds := orderlytest.NewCredentials(t)
	url, stop := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	orderlytest.Setup(t, url, creds, 0)
	cfg := orderlytest.Config(t)
	orderlytest.Attach(&cfg, url, creds, "serve")
	inst := orderlytest.Start(t, cfg)

	answers := map[string]orderlytest.Response{}
	for i := range 30 {
		key := fmt.Sprintf("drill-%d", i)
		body := orderlytest.Order(fmt.Sprintf("c-%d", i))
		if i%5 == 0 { // rejected by the processor: a total that does not add up
			body = []byte(strings.Replace(string(body), `"total":4990`, `"total":1`, 1))
		}
		r := inst.PostOrder(t, key, body, "Prefer: wait=10")
		if r.Status != http.StatusCreated && r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("%s: %d %s", key, r.Status, r.Body)
		}
		answers[key] = r
	}
	orderlytest.Eventually(t, 10*time.Second, "every result stored", func() bool {
		r := inst.PostOrder(t, "drill-29", orderlytest.Order("c-29"))
		return r.Header.Get("Idempotent-Replayed") == "true"
	})
	inst.Stop(t)

	dir := filepath.Join(t.TempDir(), "backup") // made by the backup
	var reported bool
	m, err := admin.Backup(ctx, operatorConn(t, url, creds), "", dir, func(string, uint64, uint64) { reported = true })
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Streams) != 4 || !reported {
		t.Fatalf("manifest %+v, progress %v", m, reported)
	}
	// The backup holds every order in clear: only its owner may read it,
	// also where its files are copied with their modes (before, jsm wrote
	// each snapshot's files with the umask's 0644).
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if want := fs.FileMode(0o600); d.IsDir() && fi.Mode().Perm() != 0o700 || !d.IsDir() && fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v", path, fi.Mode().Perm())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	stop() // the NATS and its data are gone
	url2, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	orderlytest.Setup(t, url2, creds, 0) // a fresh setup: empty streams, which the restore replaces

	// A damaged copy is refused before any stream is replaced: one that
	// lacks a stream's metadata, whose archive of ORDER_EVENTS has a byte
	// changed or was cut short, or whose manifest counts other messages than
	// the snapshot holds. Before, the restore replaced ORDER_COMMANDS, then
	// failed on ORDER_EVENTS with the streams after it deleted.
	damaged := func(change func(dir string)) string {
		d := filepath.Join(t.TempDir(), "backup")
		if err := os.CopyFS(d, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		change(d)
		return d
	}
	events := func(d string) string {
		p, err := jsm.SnapshotDataPath(filepath.Join(d, "ORDER_EVENTS"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	rewrite := func(path string, change func([]byte) []byte) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, change(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(d string)
		want   string
	}{
		{"without a stream's metadata", func(d string) {
			if err := os.Remove(filepath.Join(d, "ORDER_EVENTS", jsm.SnapshotMetaFile)); err != nil {
				t.Fatal(err)
			}
		}, "not a complete backup: stream ORDER_EVENTS"},
		{"a byte of an archive changed", func(d string) {
			rewrite(events(d), func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
		}, "the backup of ORDER_EVENTS is damaged"},
		{"an archive cut short", func(d string) {
			rewrite(events(d), func(b []byte) []byte { return b[:len(b)/2] })
		}, "the backup of ORDER_EVENTS is damaged"},
		{"a manifest that counts another number of messages", func(d string) {
			rewrite(filepath.Join(d, admin.ManifestFile), func(b []byte) []byte {
				return []byte(strings.Replace(string(b), fmt.Sprintf(`"messages": %d`, m.Streams[0].Messages), fmt.Sprintf(`"messages": %d`, m.Streams[0].Messages+1), 1))
			})
		}, "the manifest counts"},
		// A backup's stream configuration and consumers are restored as
		// they are: one that would send orders where others can read them
		// is refused.
		{"whose stream listens on other subjects", func(d string) {
			rewrite(filepath.Join(d, "ORDER_EVENTS", jsm.SnapshotMetaFile), editJSON(t, func(meta map[string]any) {
				meta["config"].(map[string]any)["subjects"] = []string{"orders.>"}
			}))
		}, `the backup of ORDER_EVENTS is refused: its stream listens on ["orders.>"], orderly's on ["orders.events.>"]`},
		{"whose stream republishes its messages", func(d string) {
			rewrite(filepath.Join(d, "ORDER_EVENTS", jsm.SnapshotMetaFile), editJSON(t, func(meta map[string]any) {
				meta["config"].(map[string]any)["republish"] = map[string]any{"src": ">", "dest": "leak.>"}
			}))
		}, `the backup of ORDER_EVENTS is refused: its stream republishes its messages to "leak.>"`},
		{"whose stream copies another stream", func(d string) {
			rewrite(filepath.Join(d, "ORDER_COMMANDS_DLQ", jsm.SnapshotMetaFile), editJSON(t, func(meta map[string]any) {
				meta["config"].(map[string]any)["sources"] = []map[string]any{{"name": "BILLING"}}
			}))
		}, `the backup of ORDER_COMMANDS_DLQ is refused: its stream copies messages of other streams`},
		{"whose consumer pushes its messages to a subject", func(d string) {
			p, err := jsm.SnapshotDataPath(filepath.Join(d, "ORDER_COMMANDS"))
			if err != nil {
				t.Fatal(err)
			}
			reencode(t, p, func(name string, data []byte) []byte {
				if name != "processor" {
					return data
				}
				return editJSON(t, func(c map[string]any) {
					cfg := c["config"].(map[string]any)
					cfg["deliver_subject"] = "leak.commands"
					delete(cfg, "max_waiting") // a pull consumer's setting, refused for a push one
				})(data)
			})
		}, `the backup of ORDER_COMMANDS is refused: its consumer "processor" pushes messages to "leak.commands"`},
	} {
		if _, _, err := admin.Restore(ctx, operatorConn(t, url2, creds), "", damaged(tc.change), 0, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("a restore of a backup %s: %v, want %q", tc.name, err, tc.want)
		}
		assertStreams(t, operatorConn(t, url2, creds), func(name string, st *jetstream.StreamState) string {
			if st == nil || st.Msgs != 0 || st.LastSeq != 0 {
				return "the fresh setup's empty stream"
			}
			return ""
		})
	}

	// A restore that stopped after its first stream (here: only that stream
	// restored, as a stopped restore leaves it) is finished by running it
	// again: a stream that holds what the backup holds counts as restored,
	// but only with its durable consumers (the server keeps a restored
	// stream whose consumer it could not add).
	restoredFirst := func() *jsm.Manager {
		url, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
		mgr, err := jsm.New(operatorConn(t, url, creds))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := mgr.RestoreSnapshotFromDirectory(ctx, "ORDER_COMMANDS", filepath.Join(dir, "ORDER_COMMANDS")); err != nil {
			t.Fatal(err)
		}
		return mgr
	}
	withoutConsumer := restoredFirst()
	if c, err := withoutConsumer.LoadConsumer("ORDER_COMMANDS", "processor"); err != nil {
		t.Fatal(err)
	} else if err := c.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.Restore(ctx, withoutConsumer.NatsConn(), "", dir, 0, nil); err == nil || !strings.Contains(err.Error(), "ORDER_COMMANDS: the stream exists and holds messages") {
		t.Fatalf("a restore over a restored stream without its consumer: %v", err)
	}
	mgr := restoredFirst()
	url3 := mgr.NatsConn().ConnectedUrl()
	if _, done, err := admin.Restore(ctx, operatorConn(t, url3, creds), "", dir, 0, nil); err != nil {
		t.Fatalf("a restore run again after it stopped: %v", err)
	} else if len(done) != 4 || done[0] != (admin.Restored{Stream: "ORDER_COMMANDS", Messages: m.Streams[0].Messages, Replicas: 1, Kept: true}) ||
		done[1].Stream != "ORDER_EVENTS" || done[1].Kept || done[1].Messages != m.Streams[1].Messages {
		t.Fatalf("a restore run again after it stopped reports %+v", done)
	}
	assertStreams(t, operatorConn(t, url3, creds), asInManifest(m))

	if _, _, err := admin.Restore(ctx, operatorConn(t, url2, creds), "", dir, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.Restore(ctx, operatorConn(t, url2, creds), "", dir, 0, nil); err != nil {
		t.Fatalf("the same restore again, over what it restored: %v", err)
	}
	assertStreams(t, operatorConn(t, url2, creds), asInManifest(m))
	cfg2 := orderlytest.Config(t)
	orderlytest.Attach(&cfg2, url2, creds, "serve")
	again := orderlytest.Start(t, cfg2)

	for key, before := range answers {
		body := orderlytest.Order("c-" + strings.TrimPrefix(key, "drill-"))
		if n := strings.TrimPrefix(key, "drill-"); n == "0" || n == "5" || n == "10" || n == "15" || n == "20" || n == "25" {
			body = []byte(strings.Replace(string(body), `"total":4990`, `"total":1`, 1))
		}
		r := again.PostOrder(t, key, body)
		if r.Status != before.Status || string(r.Body) != string(before.Body) || r.Header.Get("Location") != before.Header.Get("Location") {
			t.Fatalf("%s after the restore: %d %s, before %d %s", key, r.Status, r.Body, before.Status, before.Body)
		}
		if g := orderlytest.Do(t, http.MethodGet, again.URL+before.Header.Get("Location"), nil); g.Status != http.StatusOK {
			t.Fatalf("GET %s after the restore: %d", before.Header.Get("Location"), g.Status)
		}
	}
	fresh := again.PostOrder(t, "after-restore", orderlytest.Order("c-new"), "Prefer: wait=10")
	if fresh.Status != http.StatusCreated {
		t.Fatalf("a new order after the restore: %d %s", fresh.Status, fresh.Body)
	}
	for _, before := range answers {
		if before.Header.Get("Location") == fresh.Header.Get("Location") {
			t.Fatalf("the new order reuses the ID %s", fresh.Header.Get("Location"))
		}
	}
	again.Stop(t)
	if _, _, err := admin.Restore(ctx, operatorConn(t, url2, creds), "", dir, 0, nil); err == nil || !strings.Contains(err.Error(), "holds messages") {
		t.Fatalf("a restore over streams that took orders since: %v", err)
	}
}

// editJSON is a change of a JSON document by edit.
func editJSON(t *testing.T, edit func(map[string]any)) func([]byte) []byte {
	return func(b []byte) []byte {
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		edit(doc)
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// reencode writes the stream archive at path again (a valid archive), with
// each consumer's state changed by change.
func reencode(t *testing.T, path string, change func(name string, data []byte) []byte) {
	t.Helper()
	var out bytes.Buffer
	if err := admin.Rewrite(path, &out, func(c *backup.Consumer) ([]byte, error) { return change(c.Name, c.Data), nil }); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// assertStreams fails unless want(name, state) is "" for each of orderly's
// streams; state is nil for a stream that does not exist.
func assertStreams(t *testing.T, nc *nats.Conn, want func(name string, st *jetstream.StreamState) string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range admin.Streams {
		var st *jetstream.StreamState
		s, err := js.Stream(context.Background(), name)
		switch {
		case err == nil:
			st = &s.CachedInfo().State
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			t.Fatal(err)
		}
		if w := want(name, st); w != "" {
			t.Fatalf("stream %s: %+v, want %s", name, st, w)
		}
	}
}

// asInManifest wants each stream to hold what the manifest counts.
func asInManifest(m admin.Manifest) func(string, *jetstream.StreamState) string {
	return func(name string, st *jetstream.StreamState) string {
		for _, sm := range m.Streams {
			if sm.Name == name && st != nil && st.Msgs == sm.Messages && st.LastSeq == sm.LastSeq {
				return ""
			}
		}
		return "what the backup holds"
	}
}

// setUpNATS starts a NATS with orderly's users and streams, and connects
// to it as the operator.
func setUpNATS(t *testing.T) (natsauth.Credentials, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	creds := orderlytest.NewCredentials(t)
	url, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	orderlytest.Setup(t, url, creds, 0)
	nc := operatorConn(t, url, creds)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return creds, nc, js
}

// TestRestoreRefusesBeforeItDeletes: a restore into a NATS where a later
// stream holds messages is refused before an earlier, empty stream is
// deleted (before, the empty ORDER_COMMANDS was deleted and the restore then
// refused at ORDER_COMMANDS_DLQ, leaving orderly without its command stream).
func TestRestoreRefusesBeforeItDeletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nc, js := setUpNATS(t)
	dir := filepath.Join(t.TempDir(), "backup")
	m, err := admin.Backup(ctx, nc, "", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "orders.dlq.create", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.Restore(ctx, nc, "", dir, 0, nil); err == nil || !strings.Contains(err.Error(), "ORDER_COMMANDS_DLQ: the stream exists and holds messages") {
		t.Fatalf("a restore over a dead letter: %v", err)
	}
	assertStreams(t, nc, func(name string, st *jetstream.StreamState) string {
		switch {
		case st == nil:
			return "the stream left as it was"
		case name == "ORDER_COMMANDS_DLQ" && st.Msgs != 1:
			return "its dead letter"
		}
		return ""
	})
	if len(m.Streams) != len(admin.Streams) {
		t.Fatalf("manifest %+v", m)
	}
}

// TestBackupWhileOrdersArrive: a backup taken while commands arrive counts in
// its manifest what its snapshots hold, so that it restores. Before, the
// manifest was read before each snapshot was taken, and the restore of such
// a backup failed its count ("the backup had N messages").
func TestBackupWhileOrdersArrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	creds, nc, js := setUpNATS(t)
	stop := make(chan struct{})
	published := make(chan int)
	go func() {
		n := 0
		defer func() { published <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			f, err := js.PublishAsync("orders.commands.create", []byte(`{}`), jetstream.WithMsgID(fmt.Sprint("m-", n)))
			if err != nil {
				t.Error(err)
				return
			}
			n++
			if n%64 == 0 {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					t.Error(err)
					return
				}
			}
		}
	}()
	orderlytest.Eventually(t, 10*time.Second, "commands arriving", func() bool {
		s, err := js.Stream(ctx, "ORDER_COMMANDS")
		return err == nil && s.CachedInfo().State.Msgs > 1000
	})
	dir := filepath.Join(t.TempDir(), "backup")
	m, err := admin.Backup(ctx, nc, "", dir, nil)
	close(stop)
	if n := <-published; err != nil || n == 0 {
		t.Fatalf("backup: %v (%d published)", err, n)
	}
	url2, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	if _, _, err := admin.Restore(ctx, operatorConn(t, url2, creds), "", dir, 0, nil); err != nil {
		t.Fatalf("the restore of a backup taken while commands arrived: %v", err)
	}
	assertStreams(t, operatorConn(t, url2, creds), asInManifest(m))
}

// TestRestoreTakesOnlyOrderlysStreams: a restore deletes each stream its
// manifest names that exists empty, and reads the snapshot from the directory
// of that name. A manifest edited to name another application's stream, a
// path, or a stream twice is refused before anything is touched.
func TestRestoreTakesOnlyOrderlysStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	creds := orderlytest.NewCredentials(t)
	url, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	nc := operatorConn(t, url, creds)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BILLING", Subjects: []string{"billing.>"}}); err != nil {
		t.Fatal(err)
	}
	for name, manifest := range map[string]string{
		"another application's stream": `{"streams":[{"name":"BILLING"}]}`,
		"a path":                       `{"streams":[{"name":"../../etc"}]}`,
		"a stream twice":               `{"streams":[{"name":"ORDER_EVENTS"},{"name":"ORDER_EVENTS"}]}`,
		"no stream":                    `{"streams":[]}`,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, admin.ManifestFile), []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := admin.Restore(ctx, nc, "", dir, 0, nil); err == nil || !strings.Contains(err.Error(), admin.ManifestFile) {
			t.Errorf("%s: restore answered %v, want the manifest refused", name, err)
		}
	}
	if _, err := js.Stream(ctx, "BILLING"); err != nil {
		t.Fatalf("the other application's stream after the restores: %v", err)
	}

	// A backup whose manifest names a snapshot it lacks leaves the fresh
	// setup's empty streams in place.
	orderlytest.Setup(t, url, creds, 0)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, admin.ManifestFile), []byte(`{"streams":[{"name":"ORDER_COMMANDS"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.Restore(ctx, nc, "", dir, 0, nil); err == nil || !strings.Contains(err.Error(), "not a complete backup") {
		t.Fatalf("a backup without its snapshot: %v", err)
	}
	if _, err := js.Stream(ctx, "ORDER_COMMANDS"); err != nil {
		t.Fatalf("the setup's stream after a refused restore: %v", err)
	}
}

// TestBackupRefusesADirectoryWithOtherFiles: a backup is written only into a
// new or empty directory, or one that holds nothing but stream directories
// of a backup that did not finish: never over a backup, nor next to other
// files or directories, such as a NATS store's jetstream/ (refused before
// NATS is asked anything, so no connection is needed here).
func TestBackupRefusesADirectoryWithOtherFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		holds []string // paths; a trailing / makes a directory
		want  string
	}{
		{"a NATS store", []string{"ORDER_COMMANDS/", "jetstream/"}, `holds "jetstream"`},
		{"a file named as a stream", []string{"ORDER_EVENTS"}, `holds "ORDER_EVENTS"`},
		{"another file", []string{"notes.txt"}, `holds "notes.txt"`},
		{"a backup", []string{"ORDER_COMMANDS/", admin.ManifestFile}, "already holds a backup"},
	} {
		dir := t.TempDir()
		for _, p := range tc.holds {
			var err error
			if strings.HasSuffix(p, "/") {
				err = os.Mkdir(filepath.Join(dir, p), 0o700)
			} else {
				err = os.WriteFile(filepath.Join(dir, p), nil, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := admin.Backup(context.Background(), nil, "", dir, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRestoreAcrossReplicas: a cluster's backup (R3) restores into a single
// server, and a single server's (R1) into a cluster set up with
// --replicas 3, each at the replicas of the streams it replaces, with the
// processors' consumer and its position. Before, the first deleted the
// setup's streams and then failed ("replicas > 1 not supported in
// non-clustered mode"), and the second restored R1 streams into the cluster.
func TestRestoreAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	creds, nc, js := r3Cluster(t)
	for i := range 10 {
		if _, err := js.Publish(ctx, "orders.commands.create", []byte(`{}`), jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The processors' consumer has taken 4 of them.
	cons, err := js.Consumer(ctx, "ORDER_COMMANDS", "processor")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(4)
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		if err := msg.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fromCluster := filepath.Join(t.TempDir(), "r3")
	if _, err := admin.Backup(ctx, nc, "", fromCluster, nil); err != nil {
		t.Fatal(err)
	}
	restoredAt := func(nc *nats.Conn, replicas int) {
		t.Helper()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range admin.Streams {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if r := s.CachedInfo().Config.Replicas; r != replicas {
				t.Errorf("%s restored with %d replicas, want %d", name, r, replicas)
			}
		}
		// A consumer's leader of a new cluster counts its pending messages
		// once it runs: asked again until then.
		var ci *jetstream.ConsumerInfo
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := js.Consumer(ctx, "ORDER_COMMANDS", "processor")
			if err != nil {
				t.Fatal(err)
			}
			if ci = c.CachedInfo(); ci.NumPending == 6 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ci.Config.Replicas != replicas || ci.NumPending != 6 || ci.AckFloor.Stream != 4 {
			t.Errorf("the processors' consumer restored with %d replicas, %d pending, acked up to %d; want %d, 6, 4", ci.Config.Replicas, ci.NumPending, ci.AckFloor.Stream, replicas)
		}
	}

	single, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	if _, _, err := admin.Restore(ctx, operatorConn(t, single, creds), "", fromCluster, 3, nil); err == nil || !strings.Contains(err.Error(), "3 replicas need a NATS cluster") {
		t.Fatalf("a restore with --replicas 3 into a single server: %v", err)
	}
	orderlytest.Setup(t, single, creds, 0)
	if _, _, err := admin.Restore(ctx, operatorConn(t, single, creds), "", fromCluster, 0, nil); err != nil {
		t.Fatalf("a cluster's backup into a single server: %v", err)
	}
	restoredAt(operatorConn(t, single, creds), 1)

	fromSingle := filepath.Join(t.TempDir(), "r1")
	if _, err := admin.Backup(ctx, operatorConn(t, single, creds), "", fromSingle, nil); err != nil {
		t.Fatal(err)
	}
	ports2 := orderlytest.ClusterPorts(t, 3)
	orderlytest.StartClusterWith(t, ports2, creds)
	orderlytest.Setup(t, ports2.URLs(), creds, 3)
	// As a restore that stopped after deleting the empty streams and
	// restoring the first leaves them: the streams that are missing take the
	// replicas of the one that is there, not the backup's.
	js2, err := jetstream.New(operatorConn(t, ports2.URLs(), creds))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range admin.Streams[1:] {
		if err := js2.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := admin.Restore(ctx, operatorConn(t, ports2.URLs(), creds), "", fromSingle, 0, nil); err != nil {
		t.Fatalf("a single server's backup into a cluster: %v", err)
	}
	restoredAt(operatorConn(t, ports2.URLs(), creds), 3)
}

// TestRestoreBoundsWhatItReadsWhole: a snapshot's state and consumer entries
// are read whole into memory (by jsm's decoder, then by the server), so a
// restore refuses one that declares more than such an entry can hold before
// reading it. A few kilobytes of archive decompress into the 256 MiB entry
// here; before, the restore read it all (allocating over 512 MiB) before it
// failed on the JSON. The manifest and the stream's metadata are bounded too.
func TestRestoreBoundsWhatItReadsWhole(t *testing.T) {
	// Not parallel: the allocations counted are the process's.
	ctx := context.Background()
	_, nc, _ := setUpNATS(t)
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := admin.Backup(ctx, nc, "", dir, nil); err != nil {
		t.Fatal(err)
	}
	const huge = 256 << 20
	copyOf := func() string {
		d := filepath.Join(t.TempDir(), "backup")
		if err := os.CopyFS(d, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// commands writes ORDER_COMMANDS's archive in d again with the entries
	// write makes, and the end marker.
	commands := func(d string, write func(enc *backup.Encoder) error) {
		path, err := jsm.SnapshotDataPath(filepath.Join(d, "ORDER_COMMANDS"))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		enc := backup.NewEncoder(&out)
		if err := errors.Join(write(enc), enc.WriteEnd(), enc.Close()); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d bytes of archive", out.Len())
		if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// blanks is an entry named name of huge blanks (a JSON document's
	// whitespace), streamed into the archive.
	blanks := func(enc *backup.Encoder, name string) error {
		return enc.WriteMessage(&backup.Message{Subject: name, PayloadSize: huge, Body: io.LimitReader(repeat(' '), huge)})
	}
	state := func(enc *backup.Encoder, consumers int) error {
		return enc.WriteState(time.Now().UnixNano(), api.StreamState{Consumers: consumers})
	}
	grow := func(path string, size int) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, io.LimitReader(repeat(' '), int64(size))); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(d string)
		want   string
	}{
		{"a huge consumer entry", func(d string) {
			commands(d, func(enc *backup.Encoder) error { return errors.Join(state(enc, 1), blanks(enc, "consumers/processor")) })
		}, `the backup of ORDER_COMMANDS is refused: its consumer "processor" is 268435456 bytes, more than 67108864`},
		{"a huge state", func(d string) {
			commands(d, func(enc *backup.Encoder) error { return blanks(enc, "state.json") })
		}, "the backup of ORDER_COMMANDS is refused: its state.json is 268435456 bytes, more than 1048576"},
		{"many consumers", func(d string) {
			commands(d, func(enc *backup.Encoder) error { return state(enc, 1<<30) })
		}, "the backup of ORDER_COMMANDS is refused: its state.json declares 1073741824 consumers, more than 100000"},
		{"a huge manifest", func(d string) { grow(filepath.Join(d, admin.ManifestFile), 2<<20) }, admin.ManifestFile + ": more than 1048576 bytes"},
		{"huge metadata", func(d string) {
			grow(filepath.Join(d, "ORDER_EVENTS", jsm.SnapshotMetaFile), 2<<20)
		}, "the backup of ORDER_EVENTS is refused: its " + jsm.SnapshotMetaFile + ": more than 1048576 bytes"},
	} {
		d := copyOf()
		tc.change(d)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := admin.Restore(ctx, nc, "", d, 0, nil)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
			t.Errorf("%s: the restore allocated %d MiB", tc.name, alloc>>20)
		}
	}
}

// repeat is an endless reader of b.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// r3Cluster starts a three-node cluster with orderly's streams at three
// replicas, and connects to it as the operator.
func r3Cluster(t *testing.T) (natsauth.Credentials, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	creds := orderlytest.NewCredentials(t)
	ports := orderlytest.ClusterPorts(t, 3)
	orderlytest.StartClusterWith(t, ports, creds)
	orderlytest.Setup(t, ports.URLs(), creds, 3)
	nc := operatorConn(t, ports.URLs(), creds)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return creds, nc, js
}

// TestRestoreAfterAStalledOne: a cluster holds a restore of a stream whose
// chunks never came (as when the first chunk found no responders: the node
// that takes the snapshot subscribes, then answers, and the subscription
// can reach the client's node after the answer; once in CI) and answers a
// new restore of that stream with "stream name already in use" (10130): it
// keeps a failed restore's assignment until the stream is deleted. orderly
// restore deletes what the stalled restore left, tries again a second later
// and restores the stream; it failed at once before.
func TestRestoreAfterAStalledOne(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster and a stalled restore; run without -short")
	}
	t.Parallel()
	ctx := context.Background()
	_, nc, js := r3Cluster(t)
	dlq := events.DeadLetterStream
	for i := range 3 {
		if _, err := js.Publish(ctx, events.DeadLetterSubject, []byte(`{}`), jetstream.WithMsgID(fmt.Sprint("dlq-", i))); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := admin.Backup(ctx, nc, "", dir, nil); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if err := js.DeleteStream(ctx, dlq); err != nil {
		t.Fatal(err)
	}
	// A restore of the stream that sends nothing.
	req, err := json.Marshal(map[string]any{"config": cfg, "state": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := nc.Request("$JS.API.STREAM.RESTORE."+dlq, req, 5*time.Second)
	if err != nil || !bytes.Contains(resp.Data, []byte("deliver_subject")) {
		t.Fatalf("a restore that sends nothing: %v %s", err, resp.Data)
	}
	began := time.Now()
	_, done, err := admin.Restore(ctx, nc, "", dir, 0, nil)
	if err != nil {
		t.Fatalf("restore beside a stalled one: %v", err)
	}
	t.Logf("restored %s after it (%v)", time.Since(began).Round(100*time.Millisecond), done)
	st, err := js.Stream(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("%s holds %d messages, want 3", dlq, n)
	}
}
