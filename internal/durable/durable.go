// Package durable is the group commit of `orderly serve --fsync group`
// (ADR 0012): the embedded NATS server writes every message to the file
// system before it acknowledges it, and syncs in the background; an answer
// to a client waits for a sync round that started after the answer was
// known, so that what it says survives power loss. Concurrent answers share
// a round: one set of fsyncs for all of them, where the server's own
// `sync_always` syncs every message on its own.
package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrStopped is returned to waiters when the syncer stops.
var ErrStopped = errors.New("durable: the syncer stopped")

// round is one sync of everything written before it started.
type round struct {
	done chan struct{}
	err  error
}

// Syncer runs sync rounds on demand, one at a time.
type Syncer struct {
	sync   func() error
	mu     sync.Mutex
	next   *round // the round that starts next; the waiters that come now join it
	kick   chan struct{}
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	rounds atomic.Uint64
	base   time.Time    // the clock of synced: time since base, monotonic
	synced atomic.Int64 // when the latest round without error started; 0: none yet
}

// New starts a syncer that runs sync for each round.
func New(sync func() error) *Syncer {
	s := &Syncer{sync: sync, kick: make(chan struct{}, 1), stop: make(chan struct{}), base: time.Now()}
	s.wg.Add(1)
	go s.loop()
	return s
}

func (s *Syncer) loop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		s.mu.Lock()
		r := s.next
		s.next = nil // who waits from now on waits for the round after this one
		s.mu.Unlock()
		if r == nil {
			continue
		}
		start := max(time.Since(s.base), 1)
		r.err = s.sync()
		if r.err == nil {
			s.synced.Store(int64(start))
		}
		s.rounds.Add(1)
		close(r.done)
	}
}

// Wait returns once a round that started after the call has synced, with
// that round's error; or with ctx's error, or ErrStopped.
func (s *Syncer) Wait(ctx context.Context) error {
	s.mu.Lock()
	r := s.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		s.next = r
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default: // a kick is pending: the loop takes the round when it is free
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return ErrStopped
	}
}

// SyncedSince reports whether a round that started after t has synced
// without error: what was written to the files before t is durable. t must
// come from this process's clock (time.Now, with its monotonic reading).
func (s *Syncer) SyncedSince(t time.Time) bool {
	synced := s.synced.Load()
	return synced > 0 && !t.IsZero() && t.Sub(s.base) < time.Duration(synced)
}

// Rounds is the number of rounds run so far.
func (s *Syncer) Rounds() uint64 { return s.rounds.Load() }

// Stop ends the loop after the running round; waiters get ErrStopped.
func (s *Syncer) Stop() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
}

// StreamFiles syncs the message blocks that the streams of an embedded
// server append to: for each stream directory (in the order given, which is
// the order of cause and effect: a command before the event it makes), the
// newest block and any block created since the last round, and the
// directory itself when a block was created. Blocks are only appended to at
// the end; older ones change only when messages are removed, which no
// answer depends on.
type StreamFiles struct {
	dirs   []string
	newest []int   // per directory: the newest block at the last round
	size   []int64 // and its size and modification time then: a block that
	mtime  []int64 // has not changed since needs no sync
	fsync  func(path string) error
}

// NewStreamFiles syncs the message blocks of streams under storeDir (the
// server's JetStream store directory), account account.
func NewStreamFiles(storeDir, account string, streams ...string) *StreamFiles {
	f := &StreamFiles{fsync: syncPath}
	for _, s := range streams {
		f.dirs = append(f.dirs, filepath.Join(storeDir, "jetstream", account, "streams", s, "msgs"))
		f.newest = append(f.newest, 0)
		f.size = append(f.size, -1)
		f.mtime = append(f.mtime, 0)
	}
	return f
}

// Sync is one round; it is not safe for concurrent use (the Syncer runs one
// round at a time).
func (f *StreamFiles) Sync() error {
	for i, dir := range f.dirs {
		blocks, err := blockIndexes(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue // not created yet: nothing to sync
		}
		if err != nil {
			return err
		}
		created := false
		for _, n := range blocks {
			if n < f.newest[i] {
				continue
			}
			p := filepath.Join(dir, strconv.Itoa(n)+".blk")
			size, mtime := int64(-1), int64(0)
			if n == blocks[len(blocks)-1] {
				if fi, err := os.Stat(p); err == nil {
					size, mtime = fi.Size(), fi.ModTime().UnixNano()
				}
				if n == f.newest[i] && size >= 0 && size == f.size[i] && mtime == f.mtime[i] {
					continue // not written since the last round synced it
				}
			}
			if n > f.newest[i] {
				created = true
			}
			if err := f.fsync(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err // (a block removed since the listing holds nothing to keep)
			}
			if n == blocks[len(blocks)-1] {
				f.size[i], f.mtime[i] = size, mtime // what the sync covered at least
			}
		}
		if created {
			if err := f.fsync(dir); err != nil {
				return err
			}
		}
		if len(blocks) > 0 {
			f.newest[i] = blocks[len(blocks)-1]
		}
	}
	return nil
}

// blockIndexes lists the block numbers in dir, ascending.
func blockIndexes(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".blk")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(name); err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// syncPath fsyncs a file or a directory.
func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	return nil
}
