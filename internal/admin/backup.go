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
	"github.com/nats-io/jsm.go/backup"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
// server as it is taken and read back from the disk after) and writes the
// manifest last: a directory without a manifest is not a backup. Taken while
// orderly runs, each stream is a consistent snapshot of itself, which the
// manifest counts; the streams are taken one after the other.
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
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o600); err != nil {
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
// and the consumers' positions are what they were. The whole backup is read
// and checked first, and every stream looked at, before anything is
// changed. A stream that exists empty (a fresh `orderly setup`) is replaced;
// one that holds what the backup holds is kept, so a restore that stopped
// part way is finished by running it again; one with other messages refuses
// the restore. Restart orderly's processes afterwards.
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
	// Every snapshot is read through (its checksums, its entries up to the
	// archive's end) and matched with the manifest before NATS is asked
	// anything, so that a damaged or incomplete backup leaves the fresh
	// setup as it was.
	infos := make(map[string]*backup.InfoReport, len(m.Streams))
	for _, sm := range m.Streams {
		info, err := sm.readBack(dir, progress)
		if err != nil {
			return m, err
		}
		infos[sm.Name] = info
	}
	mgr, err := jsm.New(nc, jsm.WithTimeout(30*time.Second))
	if err != nil {
		return m, err
	}
	// What each stream holds now is looked at before any is deleted: one
	// stream with other messages refuses the whole restore. A stream that
	// holds what the backup holds was restored by an earlier run (one that
	// stopped part way, or finished), and is kept.
	var todo []StreamManifest
	var empty []*jsm.Stream
	for _, sm := range m.Streams {
		s, st, err := loadState(mgr, sm.Name)
		switch {
		case err != nil:
			return m, fmt.Errorf("stream %s: %w", sm.Name, err)
		case s == nil:
		case st.Msgs == 0 && st.LastSeq == 0:
			empty = append(empty, s)
		case holds(st, infos[sm.Name]):
			continue
		default:
			return m, fmt.Errorf("%s: %w", sm.Name, ErrNotEmpty)
		}
		todo = append(todo, sm)
	}
	for _, s := range empty {
		if err := s.Delete(); err != nil {
			return m, fmt.Errorf("stream %s: %w", s.Name(), err)
		}
	}
	for _, sm := range todo {
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

// readBack reads the snapshot of sm in the backup in dir through, and
// matches it with the manifest.
func (sm StreamManifest) readBack(dir string, progress Progress) (*backup.InfoReport, error) {
	sdir := filepath.Join(dir, sm.Name)
	_, err := jsm.SnapshotDataPath(sdir)
	if err == nil {
		_, err = os.Stat(filepath.Join(sdir, jsm.SnapshotMetaFile))
	}
	if err != nil {
		return nil, fmt.Errorf("not a complete backup: stream %s: %w", sm.Name, err)
	}
	info, err := readBack(sdir, sm.Name, progress)
	if err != nil {
		return nil, fmt.Errorf("the backup of %s is damaged, nothing was restored: %w", sm.Name, err)
	}
	if err := checkRestorable(sdir, sm.Name, info); err != nil {
		return nil, fmt.Errorf("the backup of %s is refused: %w; nothing was restored", sm.Name, err)
	}
	if info.Messages != sm.Messages || lastSeq(info) != sm.LastSeq {
		return nil, fmt.Errorf("the manifest counts %d messages up to sequence %d in %s, its snapshot holds %d up to %d: nothing was restored",
			sm.Messages, sm.LastSeq, sm.Name, info.Messages, lastSeq(info))
	}
	return info, nil
}

// subjects are the subjects of each of orderly's streams.
var subjects = func() map[string][]string {
	var t jsstore.Topology
	m := map[string][]string{}
	for _, c := range []jetstream.StreamConfig{t.CommandStreamConfig(), t.EventStreamConfig(), t.DeadLetterStreamConfig(), t.ResultsStreamConfig()} {
		m[c.Name] = c.Subjects
	}
	return m
}()

// checkRestorable refuses a snapshot whose stream or consumers, restored as
// they are, would send messages where orderly does not: a stream on other
// subjects than orderly's, one that republishes its messages, copies other
// streams or transforms subjects, or a consumer that pushes to a subject
// (orderly's consumers, and the services', are pulled).
func checkRestorable(sdir, name string, info *backup.InfoReport) error {
	cfg := info.Config
	switch {
	case !slices.Equal(cfg.Subjects, subjects[name]):
		return fmt.Errorf("its stream listens on %q, orderly's on %q", cfg.Subjects, subjects[name])
	case cfg.RePublish != nil:
		return fmt.Errorf("its stream republishes its messages to %q", cfg.RePublish.Destination)
	case cfg.Mirror != nil || len(cfg.Sources) > 0:
		return errors.New("its stream copies messages of other streams")
	case cfg.SubjectTransform != nil:
		return errors.New("its stream transforms subjects")
	}
	data, err := jsm.SnapshotDataPath(sdir)
	if err != nil {
		return err
	}
	f, err := os.Open(data)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := backup.NewDecoder(f)
	for {
		item, err := dec.Next() // the consumers come before the messages
		if err != nil {
			return err
		}
		c, ok := item.(*backup.Consumer)
		if !ok {
			if _, state := item.(*backup.State); state {
				continue
			}
			return nil
		}
		var st server.SnapshotConsumerState
		if err := json.Unmarshal(c.Data, &st); err != nil {
			return fmt.Errorf("its consumer %q cannot be read: %w", c.Name, err)
		}
		if st.ConsumerConfig == nil { // jsm's decoder refuses it already
			return fmt.Errorf("its consumer %q has no configuration", c.Name)
		}
		if st.DeliverSubject != "" {
			return fmt.Errorf("its consumer %q pushes messages to %q", c.Name, st.DeliverSubject)
		}
	}
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

// holds reports whether a stream in state st holds the snapshot's messages:
// the same count, sequences and time of the last message.
func holds(st *api.StreamState, info *backup.InfoReport) bool {
	return st.Msgs == info.Messages && st.LastSeq == lastSeq(info) &&
		(info.Messages == 0 || st.FirstSeq == info.FirstSeq && st.LastTime.Equal(info.LastTime))
}

// loadState is the stream name and its state; nil when it does not exist.
func loadState(mgr *jsm.Manager, name string) (*jsm.Stream, *api.StreamState, error) {
	known, err := mgr.IsKnownStream(name)
	if err != nil || !known {
		return nil, nil, err
	}
	s, err := mgr.LoadStream(name)
	if err != nil {
		return nil, nil, err
	}
	st, err := s.State()
	if err != nil {
		return nil, nil, err
	}
	return s, &st, nil
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
