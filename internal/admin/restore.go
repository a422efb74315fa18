package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/jsm.go"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/jsm.go/backup"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats-server/v2/server/archive"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/readlimit"
)

// ErrNotEmpty refuses to restore over a stream that holds messages.
var ErrNotEmpty = errors.New("the stream exists and holds messages: restore only into a new NATS (or delete the stream first)")

// ReadManifest reads and checks the manifest of the backup in dir: a
// directory without one is not a complete backup. Restore reads it first;
// a tool reads it before it connects to NATS, to refuse such a directory
// at once.
func ReadManifest(dir string) (m Manifest, err error) {
	b, err := readSmall(filepath.Join(dir, ManifestFile))
	if errors.Is(err, readlimit.ErrTooLarge) {
		return m, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	if err != nil {
		return m, fmt.Errorf("not a complete backup: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	if err := m.check(); err != nil {
		return m, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	return m, nil
}

// Restore writes every stream of the backup in dir back, with its consumers,
// sequences and timestamps as they were, so that order IDs, stored responses
// and the consumers' positions are what they were. The whole backup is read
// and checked first, and every stream looked at, before anything is
// changed. A stream that exists empty (a fresh `orderly setup`) is replaced;
// one that holds what the backup holds is kept, so a restore that stopped
// part way is finished by running it again; one with other messages refuses
// the restore.
//
// Each stream, with its durable consumers, gets replicas copies: 0 takes
// those of orderly's streams already there (what orderly setup, or a restore
// that stopped, made), else 1 on a single server and the backup's on a
// cluster. So a backup of a single
// `orderly serve` restores into a cluster set up with --replicas 3 at R3,
// and a cluster's backup into a single server at R1. Restart orderly's
// processes afterwards. domain is the JetStream domain of orderly's streams
// (empty: the connected server's).
func Restore(ctx context.Context, nc *nats.Conn, domain, dir string, replicas int, progress Progress) (m Manifest, done []Restored, err error) {
	if m, err = ReadManifest(dir); err != nil {
		return m, done, err
	}
	// Through another domain the server connected to (a leaf node) says
	// nothing of the JetStream behind it: replicas are left to that one,
	// which refuses more than it has.
	clustered := domain != "" || nc.ConnectedClusterName() != ""
	if replicas > 1 && !clustered {
		return m, done, fmt.Errorf("%d replicas need a NATS cluster; this NATS is a single server", replicas)
	}
	// Every snapshot is read through (its checksums, its entries up to the
	// archive's end) and matched with the manifest before NATS is asked
	// anything, so that a damaged or incomplete backup leaves the fresh
	// setup as it was.
	snaps := make([]*snapshot, 0, len(m.Streams))
	for _, sm := range m.Streams {
		s, err := sm.snapshotIn(dir, progress)
		if err != nil {
			return m, done, err
		}
		snaps = append(snaps, s)
	}
	mgr, err := manager(nc, domain)
	if err != nil {
		return m, done, err
	}
	// What each stream holds now is looked at before any is deleted: one
	// stream with other messages refuses the whole restore. A stream that
	// holds what the backup holds, with its durable consumers, was restored
	// by an earlier run (one that stopped part way, or finished), and is kept.
	var todo []*snapshot
	var empty []*jsm.Stream
	streams := make([]*jsm.Stream, len(snaps))
	states := make([]*api.StreamState, len(snaps))
	var existing *jsm.Stream // the first of orderly's streams there now
	for i, snap := range snaps {
		if streams[i], states[i], err = loadState(mgr, snap.Name); err != nil {
			return m, done, fmt.Errorf("stream %s: %w", snap.Name, err)
		}
		if existing == nil {
			existing = streams[i]
		}
	}
	for i, snap := range snaps {
		s, st := streams[i], states[i]
		snap.replicas = restoredReplicas(replicas, existing, clustered, snap.info.Config.Replicas)
		switch {
		case s == nil:
		case st.Msgs == 0 && st.LastSeq == 0:
			empty = append(empty, s)
		default:
			kept, err := snap.heldBy(s, st)
			if err != nil {
				return m, done, fmt.Errorf("stream %s: %w", snap.Name, err)
			}
			if !kept {
				return m, done, fmt.Errorf("%s: %w", snap.Name, ErrNotEmpty)
			}
			done = append(done, Restored{Stream: snap.Name, Messages: st.Msgs, Replicas: s.Replicas(), Kept: true})
			continue
		}
		todo = append(todo, snap)
	}
	for _, s := range empty {
		if err := s.Delete(); err != nil {
			return m, done, fmt.Errorf("stream %s: %w", s.Name(), err)
		}
	}
	for _, snap := range todo {
		if err := snap.restore(ctx, mgr, progress); err != nil {
			return m, done, err
		}
		done = append(done, Restored{Stream: snap.Name, Messages: snap.Messages, Replicas: snap.replicas})
	}
	return m, done, nil
}

// Restored is what a restore did with one stream.
type Restored struct {
	Stream   string
	Messages uint64
	Replicas int
	// Kept is set for a stream that held the backup's messages already (an
	// earlier restore wrote it), which this restore left as it was.
	Kept bool
}

// restoredReplicas is the replica count of a stream restored from a
// snapshot of backupR replicas where existing is one of orderly's streams
// (nil if none is): the replicas of the streams that are there (the one it
// replaces, or those a stopped restore or orderly setup made), so that all
// four come back alike.
func restoredReplicas(asked int, existing *jsm.Stream, clustered bool, backupR int) int {
	switch {
	case asked > 0:
		return asked
	case existing != nil:
		return max(existing.Replicas(), 1)
	case !clustered:
		return 1
	default:
		return max(backupR, 1)
	}
}

// snapshot is one stream of a backup, read through and checked.
type snapshot struct {
	StreamManifest
	dir      string
	info     *backup.InfoReport
	durables []string // its durable consumers
	replicas int      // of the stream restored from it
}

// snapshotIn is the snapshot of sm in the backup in dir, read through,
// checked, and matched with the manifest.
func (sm StreamManifest) snapshotIn(dir string, progress Progress) (*snapshot, error) {
	sdir := filepath.Join(dir, sm.Name)
	_, err := jsm.SnapshotDataPath(sdir)
	if err == nil {
		_, err = os.Stat(filepath.Join(sdir, jsm.SnapshotMetaFile))
	}
	if err != nil {
		return nil, fmt.Errorf("not a complete backup: stream %s: %w", sm.Name, err)
	}
	if err := checkSizes(sdir); err != nil {
		return nil, fmt.Errorf("the backup of %s is refused: %w; nothing was restored", sm.Name, err)
	}
	info, err := readBack(sdir, sm.Name, progress)
	if err != nil {
		return nil, fmt.Errorf("the backup of %s is damaged, nothing was restored: %w", sm.Name, err)
	}
	snap := &snapshot{StreamManifest: sm, dir: sdir, info: info}
	if err := snap.check(); err != nil {
		return nil, fmt.Errorf("the backup of %s is refused: %w; nothing was restored", sm.Name, err)
	}
	if info.Messages != sm.Messages || lastSeq(info) != sm.LastSeq {
		return nil, fmt.Errorf("the manifest counts %d messages up to sequence %d in %s, its snapshot holds %d up to %d: nothing was restored",
			sm.Messages, sm.LastSeq, sm.Name, info.Messages, lastSeq(info))
	}
	return snap, nil
}

// What a restore reads whole into memory is bounded, so that a backup
// crafted to decompress into a huge entry (5 KB of archive made a 256 MiB
// consumer entry, which jsm's decoder read whole) is refused before it is
// read. orderly's documents are a few kilobytes; a consumer's entry holds its
// configuration and its pending acknowledgements (orderly's consumers allow
// at most 4,096 pending, a few hundred KB).
const (
	maxDocument      = 1 << 20  // the manifest, a snapshot's metadata and its state entry
	maxConsumerEntry = 64 << 20 // a consumer's entry in a snapshot
	maxConsumers     = 100_000  // consumer entries in a snapshot
)

// readSmall is the file at path, refused with *readlimit.TooLargeError
// above maxDocument. It reads rather than asks the size: a device or a pipe
// has none.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readlimit.ReadAll(f, maxDocument)
}

// checkSizes refuses the snapshot in sdir if its metadata, its state entry
// or one of its consumer entries is larger than a restore reads whole, or it
// declares more consumers than maxConsumers. It reads the archive's entry
// headers up to its first message; a damaged archive passes, for the full
// read-through to report.
func checkSizes(sdir string) error {
	if _, err := readSmall(filepath.Join(sdir, jsm.SnapshotMetaFile)); err != nil {
		return fmt.Errorf("its %s: %w", jsm.SnapshotMetaFile, err)
	}
	path, err := jsm.SnapshotDataPath(sdir)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ar := archive.NewReader(s2.NewReader(bufio.NewReaderSize(f, 1<<20)))
	hdr, err := ar.Next()
	if err != nil || hdr.Name != "state.json" {
		return nil
	}
	if size := hdr.HeaderSize + hdr.PayloadSize; size > maxDocument {
		return fmt.Errorf("its state.json is %d bytes, more than %d", size, maxDocument)
	}
	var st struct {
		Consumers int `json:"consumer_count"`
	}
	if json.NewDecoder(ar).Decode(&st) != nil {
		return nil
	}
	if st.Consumers > maxConsumers {
		return fmt.Errorf("its state.json declares %d consumers, more than %d", st.Consumers, maxConsumers)
	}
	for range st.Consumers {
		hdr, err := ar.Next()
		if err != nil {
			return nil
		}
		if size := hdr.HeaderSize + hdr.PayloadSize; size > maxConsumerEntry {
			return fmt.Errorf("its consumer %q is %d bytes, more than %d", strings.TrimPrefix(hdr.Name, "consumers/"), size, maxConsumerEntry)
		}
	}
	return nil
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

// subjects are the subjects of each of orderly's streams.
var subjects = func() map[string][]string {
	var t jsstore.Topology
	m := map[string][]string{}
	for _, c := range []jetstream.StreamConfig{t.CommandStreamConfig(), t.EventStreamConfig(), t.DeadLetterStreamConfig(), t.ResultsStreamConfig()} {
		m[c.Name] = c.Subjects
	}
	return m
}()

// check refuses a snapshot whose stream or consumers, restored as they are,
// would send messages where orderly does not: a stream on other subjects
// than orderly's, one that republishes its messages, copies other streams
// or transforms subjects, or a consumer that pushes to a subject (orderly's
// consumers, and the services', are pulled). It notes the durable consumers.
func (s *snapshot) check() error {
	cfg := s.info.Config
	switch {
	case !slices.Equal(cfg.Subjects, subjects[s.Name]):
		return fmt.Errorf("its stream listens on %q, orderly's on %q", cfg.Subjects, subjects[s.Name])
	case cfg.RePublish != nil:
		return fmt.Errorf("its stream republishes its messages to %q", cfg.RePublish.Destination)
	case cfg.Mirror != nil || len(cfg.Sources) > 0:
		return errors.New("its stream copies messages of other streams")
	case cfg.SubjectTransform != nil:
		return errors.New("its stream transforms subjects")
	}
	return s.consumers(func(name string, c *server.SnapshotConsumerState) error {
		if c.DeliverSubject != "" {
			return fmt.Errorf("its consumer %q pushes messages to %q", name, c.DeliverSubject)
		}
		if c.Durable != "" {
			s.durables = append(s.durables, c.Durable)
		}
		return nil
	})
}

// consumers calls each for every consumer of the snapshot (they come before
// its messages).
func (s *snapshot) consumers(each func(name string, c *server.SnapshotConsumerState) error) error {
	data, err := jsm.SnapshotDataPath(s.dir)
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
		item, err := dec.Next()
		if err != nil {
			return err
		}
		switch it := item.(type) {
		case *backup.State:
		case *backup.Consumer:
			c, err := decodeConsumer(it)
			if err != nil {
				return err
			}
			if err := each(it.Name, c); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// decodeConsumer is a snapshot's consumer entry.
func decodeConsumer(c *backup.Consumer) (*server.SnapshotConsumerState, error) {
	var st server.SnapshotConsumerState
	if err := json.Unmarshal(c.Data, &st); err != nil {
		return nil, fmt.Errorf("its consumer %q cannot be read: %w", c.Name, err)
	}
	if st.ConsumerConfig == nil { // jsm's decoder refuses it already
		return nil, fmt.Errorf("its consumer %q has no configuration", c.Name)
	}
	return &st, nil
}

// heldBy reports whether stream s, in state st, holds the snapshot's
// messages (the same count, sequences and time of the last message) and its
// durable consumers: a restore of it finished.
func (s *snapshot) heldBy(stream *jsm.Stream, st *api.StreamState) (bool, error) {
	info := s.info
	if st.Msgs != info.Messages || st.LastSeq != lastSeq(info) ||
		info.Messages > 0 && (st.FirstSeq != firstSeq(info) || !st.LastTime.Equal(info.LastTime)) {
		return false, nil
	}
	names, err := stream.ConsumerNames()
	if err != nil {
		return false, err
	}
	for _, d := range s.durables {
		if !slices.Contains(names, d) {
			return false, nil
		}
	}
	return true, nil
}

// restore writes the stream back from its snapshot, with the snapshot's
// configuration and consumers but s.replicas copies of the stream and its
// durable consumers, and checks what the server then holds.
func (s *snapshot) restore(ctx context.Context, mgr *jsm.Manager, progress Progress) error {
	cfg := s.info.Config
	cfg.Replicas = s.replicas
	var st *api.StreamState
	var err error
	var unheard time.Time // when a try first met a stalled restore (stalledRestore)
	for attempt := 1; ; attempt++ {
		report, stop := reporter(progress, s.Name)
		st, err = s.send(ctx, mgr, cfg, report)
		stop()
		wait, again := retryRestore(err, attempt, unheard, time.Now())
		if !again {
			break
		}
		if stalledRestore(err) && unheard.IsZero() {
			unheard = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if !unheard.IsZero() {
			removeStalled(mgr, s.Name)
		}
	}
	if err != nil {
		if strings.Contains(err.Error(), "replicas") {
			return fmt.Errorf("restore %s with %d replicas: %w (orderly restore --replicas sets them)", s.Name, s.replicas, err)
		}
		return fmt.Errorf("restore %s: %w", s.Name, err)
	}
	if st.Msgs != s.Messages || st.LastSeq != s.LastSeq {
		return fmt.Errorf("restore %s: %d messages up to %d, the backup had %d up to %d", s.Name, st.Msgs, st.LastSeq, s.Messages, s.LastSeq)
	}
	return nil
}

// unheardFor is how long a restore goes on trying after its snapshot's
// first chunk had no responders, or the server said another restore of the
// stream is there (10130, the name in use): between tries the stalled
// restore's remains are deleted (removeStalled).
const unheardFor = 30 * time.Second

// retryRestore decides whether a restore of one stream that failed with err
// at its attempt-th try is tried again, and after how long; unheard is when
// an earlier try had no responders or 10130 (zero if none had).
//
//   - "could not create storage directory": deleting the last stream of an
//     account makes nats-server remove the account's empty streams
//     directory in a goroutine of its own; a stream created meanwhile can
//     fail to make its directory, and nothing of it is created
//     (docs/nats-facts.md, fact 15). Up to 5 tries, 200 ms apart.
//   - no responders: on a cluster, the node that receives the snapshot
//     subscribes to the subject its chunks go to and then answers the
//     restore request, and the subscription can reach the client's node
//     after the answer: the first chunk finds no one (once in CI, in
//     TestRestoreAcrossReplicas). Tried again every second for up to
//     unheardFor; so is 10130, the name in use: Restore has looked at the
//     stream before (kept, deleted or refused it), so a stream of that name
//     now is a stalled restore, this one's or another's (two restores at
//     once are not supported: the other one's is deleted too;
//     TestRestoreAfterAStalledOne).
func retryRestore(err error, attempt int, unheard, now time.Time) (wait time.Duration, again bool) {
	switch {
	case err == nil:
		return 0, false
	case strings.Contains(err.Error(), "could not create storage directory"):
		return 200 * time.Millisecond, attempt < 5
	case stalledRestore(err):
		return time.Second, unheard.IsZero() || now.Sub(unheard) < unheardFor
	}
	return 0, false
}

// removeStalled deletes what a stalled restore of stream left: a stream
// the listing does not show, which is the restore's assignment (the
// cluster keeps a failed restore's assignment "for explicit cleanup":
// processStreamAssignmentResults in server/jetstream_cluster.go, and
// answers every new restore of the name with 10130 until it is deleted), or
// a stream that is empty, as Restore deletes the empty streams it finds. A
// stream with messages, or one it cannot read, is left.
func removeStalled(mgr *jsm.Manager, stream string) {
	s, st, err := loadState(mgr, stream)
	switch {
	case err != nil:
	case s == nil:
		_ = mgr.DeleteStream(stream)
	case st.Msgs == 0 && st.LastSeq == 0:
		_ = s.Delete()
	}
}

// stalledRestore reports whether err is a restore that met a stalled one:
// its first chunk had no responders, or the server answered 10130 (the
// name in use) while it holds a stalled restore (see retryRestore).
func stalledRestore(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || api.IsNatsErr(err, 10130)
}

// send sends the snapshot to the server as a stream of configuration cfg:
// the archive as it is when cfg keeps the backup's replicas, else the
// archive with its consumers' replicas changed on the way.
func (s *snapshot) send(ctx context.Context, mgr *jsm.Manager, cfg api.StreamConfig, report func(done, total uint64)) (*api.StreamState, error) {
	if cfg.Replicas == s.info.Config.Replicas {
		_, st, err := mgr.RestoreSnapshotFromDirectory(ctx, s.Name, s.dir, jsm.RestoreConfiguration(cfg),
			jsm.RestoreNotify(func(p jsm.RestoreProgress) { report(p.BytesSent(), uint64(p.ChunksToSend())*uint64(p.ChunkSize())) }))
		return st, err
	}
	meta, err := os.Open(filepath.Join(s.dir, jsm.SnapshotMetaFile))
	if err != nil {
		return nil, err
	}
	data, err := jsm.SnapshotDataPath(s.dir)
	if err != nil {
		meta.Close()
		return nil, err
	}
	fi, err := os.Stat(data)
	if err != nil {
		meta.Close()
		return nil, err
	}
	archive := s.withReplicas(data, cfg.Replicas)
	total := uint64(fi.Size())
	return mgr.RestoreSnapshotFromBuffer(ctx, s.Name, &countingReader{ReadCloser: archive, report: func(n uint64) { report(min(n, total), total) }}, meta,
		jsm.RestoreConfiguration(cfg))
}

// withReplicas is the archive at path written again as it is read, with
// each durable consumer at replicas copies, and every other at most that
// many (the server refuses a consumer with more replicas than its stream).
func (s *snapshot) withReplicas(path string, replicas int) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(rewrite(path, pw, func(c *backup.Consumer) ([]byte, error) {
			st, err := decodeConsumer(c)
			if err != nil {
				return nil, err
			}
			want := min(st.Replicas, replicas)
			if st.Durable != "" {
				want = replicas
			}
			if st.Replicas == want {
				return c.Data, nil
			}
			return setReplicas(c.Data, want)
		}))
	}()
	return pr
}

// rewrite writes the archive at path to w again, each consumer's entry as
// consumer makes it.
func rewrite(path string, w io.Writer, consumer func(*backup.Consumer) ([]byte, error)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec, enc := backup.NewDecoder(f), backup.NewEncoder(w)
	for {
		item, err := dec.Next()
		if errors.Is(err, io.EOF) {
			return enc.Close()
		}
		if err != nil {
			return err
		}
		switch it := item.(type) {
		case *backup.State:
			err = enc.WriteState(it.Ts, it.State)
		case *backup.Consumer:
			var data []byte
			if data, err = consumer(it); err == nil {
				err = enc.WriteConsumer(it.Name, it.Ts, data)
			}
		case *backup.Message:
			err = enc.WriteMessage(it)
		case backup.End:
			err = enc.WriteEnd()
		}
		if err != nil {
			return err
		}
	}
}

// setReplicas is a consumer's entry with its configuration's replica count
// set, every other value as it was (numbers kept as written).
func setReplicas(data []byte, replicas int) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var entry map[string]any
	if err := dec.Decode(&entry); err != nil {
		return nil, err
	}
	cfg, ok := entry["config"].(map[string]any)
	if !ok {
		return nil, errors.New("a consumer entry without its configuration")
	}
	cfg["num_replicas"] = replicas
	return json.Marshal(entry)
}

// countingReader reports the bytes read so far.
type countingReader struct {
	io.ReadCloser
	n      uint64
	report func(n uint64)
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n += uint64(n)
	r.report(r.n)
	return n, err
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
