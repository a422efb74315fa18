package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/jsm.go"
	"github.com/nats-io/jsm.go/backup"
	"github.com/nats-io/nats.go"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/filesync"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// Streams are orderly's streams, in the order a backup takes and a restore
// writes them.
var Streams = []string{events.CommandStream, events.EventStream, events.DeadLetterStream, jsstore.ResultsStream}

// ManifestFile names a backup's manifest in its directory.
const ManifestFile = "orderly-backup.json"

// Manifest describes a backup.
type Manifest struct {
	Taken   time.Time        `json:"taken"`
	Streams []StreamManifest `json:"streams"`
}

// StreamManifest is one stream of a backup.
type StreamManifest struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// Progress reports the bytes of one stream done so far.
type Progress func(stream string, done, total uint64)

// Backup snapshots every stream of orderly, with its consumers, into dir
// (one directory per stream, JetStream's own snapshot format, checked by the
// server as it is taken and read back from the disk after) and writes the
// manifest last: a directory without a manifest is not a backup. Each
// stream's files are synced before the manifest is written, and the
// manifest before Backup returns, so that a power loss after it leaves the
// whole backup (filesync). Taken while
// orderly runs, each stream is a consistent snapshot of itself, which the
// manifest counts; the streams are taken one after the other. domain is
// the JetStream domain of orderly's streams (empty: the connected server's).
func Backup(ctx context.Context, nc *nats.Conn, domain, dir string, progress Progress) (Manifest, error) {
	if err := CheckBackupDir(dir); err != nil {
		return Manifest{}, err
	}
	mgr, err := manager(nc, domain)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Taken: time.Now().UTC()}
	for _, name := range Streams {
		s, err := mgr.LoadStream(name)
		if err != nil {
			return m, fmt.Errorf("stream %s: %w", name, err)
		}
		sdir := filepath.Join(dir, name)
		report, stop := reporter(progress, name)
		_, err = s.SnapshotToDirectory(ctx, sdir, jsm.SnapshotConsumers(), jsm.SnapshotHealthCheck(),
			jsm.SnapshotNotify(func(p jsm.SnapshotProgress) { report(p.UncompressedBytesReceived(), p.BytesExpected()) }))
		stop()
		if err != nil {
			return m, fmt.Errorf("back up %s: %w", name, err)
		}
		if err := ownerOnly(sdir); err != nil {
			return m, fmt.Errorf("back up %s: %w", name, err)
		}
		// On the disk before the manifest says the backup is whole.
		if err := filesync.SyncFiles(sdir); err != nil {
			return m, fmt.Errorf("back up %s: %w", name, err)
		}
		// The manifest counts what the snapshot holds, read back from the
		// disk: a stream that took messages since its state was last read
		// (orderly runs during a backup) is counted as it was snapshotted.
		info, err := readBack(sdir, name, progress)
		if err != nil {
			return m, fmt.Errorf("the backup of %s does not read back: %w", name, err)
		}
		m.Streams = append(m.Streams, StreamManifest{Name: name, Messages: info.Messages, Bytes: info.Bytes, FirstSeq: firstSeq(info), LastSeq: lastSeq(info)})
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := filesync.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o600); err != nil {
		return m, err
	}
	return m, nil
}

// ownerOnly makes the files of a stream's snapshot readable by their owner
// only (jsm writes them with the umask's mode, 0644 mostly): they hold every
// order in clear, and keep their modes where they are copied.
func ownerOnly(sdir string) error {
	for _, name := range []string{jsm.SnapshotDataFile, jsm.SnapshotLegacyDataFile, jsm.SnapshotMetaFile} {
		if err := os.Chmod(filepath.Join(sdir, name), 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Chmod(sdir, 0o700)
}

// CheckBackupDir refuses a directory a backup must not be written into
// (Backup checks it first; a tool checks it before it connects to NATS):
// one that holds a backup, or anything other than the stream directories
// of a backup that did not finish (which a new backup replaces). So a
// backup never mixes with other files, such as a NATS store's.
func CheckBackupDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("backup directory: %w", err)
	}
	for _, e := range entries {
		switch {
		case e.Name() == ManifestFile:
			return fmt.Errorf("%s already holds a backup", dir)
		case e.IsDir() && slices.Contains(Streams, e.Name()):
			// a stream of a backup that did not finish
		default:
			return fmt.Errorf("%s is not empty (it holds %q): give a new or empty directory; only that of a backup that did not finish is reused", dir, e.Name())
		}
	}
	return nil
}

// readBack reads the snapshot of stream name in sdir through to its end
// (jsm's backup.Info: the archive's checksums and the order of its entries),
// reporting progress as "checking <name>", and refuses one of another
// stream.
func readBack(sdir, name string, progress Progress) (*backup.InfoReport, error) {
	report, stop := reporter(progress, "checking "+name)
	defer stop()
	info, err := backup.Info(sdir, backup.ScanNotify(func(p backup.Progress) { report(p.BytesRead(), p.BytesTotal()) }))
	if err != nil {
		return nil, err
	}
	if info.Config.Name != name {
		return nil, fmt.Errorf("it holds stream %q", info.Config.Name)
	}
	return info, nil
}

// firstSeq and lastSeq are the sequences a stream restored from the snapshot
// starts and ends at: those of its state (a stream whose messages were
// removed keeps its sequences), or of its messages if later.
func firstSeq(info *backup.InfoReport) uint64 {
	if info.Messages > 0 && (info.Declared.FirstSeq == 0 || info.FirstSeq < info.Declared.FirstSeq) {
		return info.FirstSeq
	}
	return info.Declared.FirstSeq
}

func lastSeq(info *backup.InfoReport) uint64 { return max(info.Declared.LastSeq, info.LastSeq) }

// reporter passes jsm's progress notifications, which arrive from its own
// goroutines, to progress one at a time, and none after stop.
func reporter(progress Progress, stream string) (report func(done, total uint64), stop func()) {
	var mu sync.Mutex
	stopped := false
	report = func(done, total uint64) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped && progress != nil {
			progress(stream, done, total)
		}
	}
	stop = func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
	return report, stop
}

// manager is a jsm manager on nc for the JetStream of domain (empty: the
// connected server's).
func manager(nc *nats.Conn, domain string) (*jsm.Manager, error) {
	opts := []jsm.Option{jsm.WithTimeout(30 * time.Second)}
	if domain != "" {
		opts = append(opts, jsm.WithDomain(domain))
	}
	return jsm.New(nc, opts...)
}
