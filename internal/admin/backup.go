package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jsm.go"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"

	"github.com/orderly-dev/orderly/events"
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
// server as it is taken) and writes the manifest last: a directory without a
// manifest is not a backup. Taken while orderly runs, each stream is a
// consistent snapshot of itself; the streams are taken one after the other.
func Backup(ctx context.Context, nc *nats.Conn, dir string, progress Progress) (Manifest, error) {
	if err := checkBackupDir(dir); err != nil {
		return Manifest{}, err
	}
	mgr, err := jsm.New(nc, jsm.WithTimeout(30*time.Second))
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Taken: time.Now().UTC()}
	for _, name := range Streams {
		s, err := mgr.LoadStream(name)
		if err != nil {
			return m, fmt.Errorf("stream %s: %w", name, err)
		}
		st, err := s.State()
		if err != nil {
			return m, fmt.Errorf("stream %s: %w", name, err)
		}
		report, stop := reporter(progress, name)
		_, err = s.SnapshotToDirectory(ctx, filepath.Join(dir, name), jsm.SnapshotConsumers(), jsm.SnapshotHealthCheck(),
			jsm.SnapshotNotify(func(p jsm.SnapshotProgress) { report(p.UncompressedBytesReceived(), p.BytesExpected()) }))
		stop()
		if err != nil {
			return m, fmt.Errorf("back up %s: %w", name, err)
		}
		m.Streams = append(m.Streams, StreamManifest{Name: name, Messages: st.Msgs, Bytes: st.Bytes, FirstSeq: st.FirstSeq, LastSeq: st.LastSeq})
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o600); err != nil {
		return m, err
	}
	return m, nil
}

// checkBackupDir refuses a directory a backup must not be written into:
// one that holds a backup, or anything other than the stream directories
// of a backup that did not finish (which a new backup replaces). So a
// backup never mixes with other files, such as a NATS store's.
func checkBackupDir(dir string) error {
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

// ErrNotEmpty refuses to restore over a stream that holds messages.
var ErrNotEmpty = errors.New("the stream exists and holds messages: restore only into a new NATS (or delete the stream first)")

// Restore writes every stream of the backup in dir back, with its consumers,
// sequences and timestamps as they were, so that order IDs, stored responses
// and the consumers' positions are what they were. A stream that exists
// empty (a fresh `orderly setup`) is replaced; one with messages is refused.
// Restart orderly's processes afterwards.
func Restore(ctx context.Context, nc *nats.Conn, dir string, progress Progress) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return m, fmt.Errorf("not a complete backup: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	if err := m.check(); err != nil {
		return m, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	// Every snapshot must be there before the first empty stream is deleted,
	// so that a backup missing one leaves the fresh setup as it was.
	for _, sm := range m.Streams {
		sdir := filepath.Join(dir, sm.Name)
		_, err := jsm.SnapshotDataPath(sdir)
		if err == nil {
			_, err = os.Stat(filepath.Join(sdir, jsm.SnapshotMetaFile))
		}
		if err != nil {
			return m, fmt.Errorf("not a complete backup: stream %s: %w", sm.Name, err)
		}
	}
	mgr, err := jsm.New(nc, jsm.WithTimeout(30*time.Second))
	if err != nil {
		return m, err
	}
	for _, sm := range m.Streams {
		if err := clearEmpty(mgr, sm.Name); err != nil {
			return m, err
		}
	}
	for _, sm := range m.Streams {
		var st *api.StreamState
		for attempt := 1; ; attempt++ {
			report, stop := reporter(progress, sm.Name)
			_, st, err = mgr.RestoreSnapshotFromDirectory(ctx, sm.Name, filepath.Join(dir, sm.Name),
				jsm.RestoreNotify(func(p jsm.RestoreProgress) { report(p.BytesSent(), uint64(p.ChunksToSend())*uint64(p.ChunkSize())) }))
			stop()
			// Deleting the last stream of an account makes nats-server remove
			// the account's empty streams directory in a goroutine of its own;
			// a stream created meanwhile can fail to make its directory, and
			// nothing of it is created (docs/nats-facts.md, fact 15).
			if err == nil || attempt == 5 || !strings.Contains(err.Error(), "could not create storage directory") {
				break
			}
			select {
			case <-ctx.Done():
				return m, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err != nil {
			return m, fmt.Errorf("restore %s: %w", sm.Name, err)
		}
		if st.Msgs != sm.Messages || st.LastSeq != sm.LastSeq {
			return m, fmt.Errorf("restore %s: %d messages up to %d, the backup had %d up to %d", sm.Name, st.Msgs, st.LastSeq, sm.Messages, sm.LastSeq)
		}
	}
	return m, nil
}

// check refuses a manifest that names anything but orderly's streams, or one
// of them twice: a restore deletes each stream it names that exists empty,
// and reads its snapshot from the directory of that name, so a manifest
// edited by hand or by an attacker must not reach another application's
// streams or a path outside the backup.
func (m Manifest) check() error {
	if len(m.Streams) == 0 {
		return errors.New("names no stream")
	}
	seen := map[string]bool{}
	for _, sm := range m.Streams {
		switch {
		case !slices.Contains(Streams, sm.Name):
			return fmt.Errorf("names stream %q, which is not orderly's (%s)", sm.Name, strings.Join(Streams, ", "))
		case seen[sm.Name]:
			return fmt.Errorf("names stream %s twice", sm.Name)
		}
		seen[sm.Name] = true
	}
	return nil
}

// clearEmpty deletes name if it exists without messages, and refuses if it
// holds any.
func clearEmpty(mgr *jsm.Manager, name string) error {
	known, err := mgr.IsKnownStream(name)
	if err != nil || !known {
		return err
	}
	s, err := mgr.LoadStream(name)
	if err != nil {
		return err
	}
	st, err := s.State()
	if err != nil {
		return err
	}
	if st.Msgs > 0 || st.LastSeq > 0 {
		return fmt.Errorf("%s: %w", name, ErrNotEmpty)
	}
	return s.Delete()
}

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
