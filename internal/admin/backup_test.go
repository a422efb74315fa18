package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jsm "github.com/nats-io/jsm.go"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

	dir := t.TempDir()
	var reported bool
	m, err := admin.Backup(ctx, operatorConn(t, url, creds), dir, func(string, uint64, uint64) { reported = true })
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Streams) != 4 || !reported {
		t.Fatalf("manifest %+v, progress %v", m, reported)
	}

	stop() // the NATS and its data are gone
	url2, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	orderlytest.Setup(t, url2, creds, 0) // a fresh setup: empty streams, which the restore replaces

	// A copy that lacks one stream's metadata is refused before any stream
	// is replaced; one whose manifest counts other messages than the
	// snapshot holds fails its check after the restore (on a NATS of its own).
	damaged := func(change func(dir string)) string {
		d := filepath.Join(t.TempDir(), "backup")
		if err := os.CopyFS(d, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		change(d)
		return d
	}
	noMeta := damaged(func(d string) {
		if err := os.Remove(filepath.Join(d, "ORDER_EVENTS", jsm.SnapshotMetaFile)); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := admin.Restore(ctx, operatorConn(t, url2, creds), noMeta, nil); err == nil || !strings.Contains(err.Error(), "not a complete backup: stream ORDER_EVENTS") {
		t.Fatalf("a restore without a stream's metadata: %v", err)
	}
	miscounted := damaged(func(d string) {
		b, err := os.ReadFile(filepath.Join(d, admin.ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), fmt.Sprintf(`"messages": %d`, m.Streams[0].Messages), fmt.Sprintf(`"messages": %d`, m.Streams[0].Messages+1), 1))
		if err := os.WriteFile(filepath.Join(d, admin.ManifestFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	url3, _ := orderlytest.ExternalNATS(t, t.TempDir(), orderlytest.FreePort(t), creds)
	if _, err := admin.Restore(ctx, operatorConn(t, url3, creds), miscounted, nil); err == nil || !strings.Contains(err.Error(), "the backup had") {
		t.Fatalf("a restore of other messages than the manifest counts: %v", err)
	}
	if _, err := admin.Restore(ctx, operatorConn(t, url2, creds), dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Restore(ctx, operatorConn(t, url2, creds), dir, nil); err == nil || !strings.Contains(err.Error(), "holds messages") {
		t.Fatalf("a second restore over the restored streams: %v", err)
	}
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
		if _, err := admin.Restore(ctx, nc, dir, nil); err == nil || !strings.Contains(err.Error(), admin.ManifestFile) {
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
	if _, err := admin.Restore(ctx, nc, dir, nil); err == nil || !strings.Contains(err.Error(), "not a complete backup") {
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
		if _, err := admin.Backup(context.Background(), nil, dir, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
