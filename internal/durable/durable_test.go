package durable

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWaitNeedsARoundThatStartsAfterIt: a waiter that arrives while a round
// runs is not released by that round (it may have started before the
// waiter's write), only by the next; waiters that arrive together share one.
func TestWaitNeedsARoundThatStartsAfterIt(t *testing.T) {
	t.Parallel()
	var started atomic.Int64
	release := make(chan struct{})
	s := New(func() error {
		started.Add(1)
		<-release
		return nil
	})
	defer s.Stop()

	first := make(chan error, 1)
	go func() { first <- s.Wait(context.Background()) }()
	waitFor(t, func() bool { return started.Load() == 1 }) // round 1 runs

	// Three waiters arrive during round 1.
	var later sync.WaitGroup
	var laterDone atomic.Int64
	for range 3 {
		later.Add(1)
		go func() {
			defer later.Done()
			if err := s.Wait(context.Background()); err != nil {
				t.Error(err)
			}
			laterDone.Add(1)
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them register
	release <- struct{}{}             // round 1 ends
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return started.Load() == 2 }) // round 2 runs for the three
	if n := laterDone.Load(); n != 0 {
		t.Fatalf("%d waiters released by a round that started before they came", n)
	}
	release <- struct{}{}
	later.Wait()
	if started.Load() != 2 || s.Rounds() != 2 {
		t.Fatalf("%d rounds started, %d done; want 2: the three share one", started.Load(), s.Rounds())
	}
}

func TestWaitGetsTheRoundsErrorAndStops(t *testing.T) {
	t.Parallel()
	boom := errors.New("EIO")
	s := New(func() error { return boom })
	if err := s.Wait(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Wait = %v, want the sync's error", err)
	}
	s.Stop()
	if err := s.Wait(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait after Stop = %v", err)
	}

	block := make(chan struct{})
	defer close(block)
	s2 := New(func() error { <-block; return nil })
	go func() { _ = s2.Wait(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s2.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its context = %v", err)
	}
}

// TestSyncedSince: what was known before a round started is durable once
// that round ends without error; what came during the round, or before a
// round that failed, is not.
func TestSyncedSince(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	inRound := make(chan struct{}, 1)
	release := make(chan struct{})
	s := New(func() error {
		inRound <- struct{}{}
		<-release
		if fail.Load() {
			return errors.New("EIO")
		}
		return nil
	})
	defer s.Stop()
	before := time.Now()
	if s.SyncedSince(before) {
		t.Fatal("synced before any round")
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait(context.Background()) }()
	<-inRound
	during := time.Now() // the round started before this
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !s.SyncedSince(before) {
		t.Fatal("a round that started later did not make it durable")
	}
	if s.SyncedSince(during) {
		t.Fatal("a round made durable what came after it started")
	}
	if s.SyncedSince(time.Time{}) {
		t.Fatal("a zero time (not known when) counted as synced")
	}

	fail.Store(true)
	go func() { done <- s.Wait(context.Background()) }()
	<-inRound
	release <- struct{}{}
	if err := <-done; err == nil {
		t.Fatal("the failed round reported no error")
	}
	if s.SyncedSince(during) {
		t.Fatal("a round that failed made something durable")
	}
	if !s.SyncedSince(before) {
		t.Fatal("a failed round took back what an earlier one synced")
	}
}

// TestStreamFilesSyncTheNewestBlocks: a round syncs the newest block of each
// stream and every block created since the last round; a stream that does
// not exist yet is skipped.
func TestStreamFilesSyncTheNewestBlocks(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	msgs := filepath.Join(store, "jetstream", "ACC", "streams", "S", "msgs")
	if err := os.MkdirAll(msgs, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"1.blk", "2.blk", "index.db"} {
		if err := os.WriteFile(filepath.Join(msgs, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := NewStreamFiles(store, "ACC", "S", "MISSING")
	var synced []string
	f.fsync = func(p string) error {
		synced = append(synced, filepath.Base(p))
		return syncPath(p)
	}
	round := func(want ...string) {
		t.Helper()
		synced = nil
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if len(synced) != len(want) {
			t.Fatalf("synced %v, want %v", synced, want)
		}
		for i := range want {
			if synced[i] != want[i] {
				t.Fatalf("synced %v, want %v", synced, want)
			}
		}
	}
	round("1.blk", "2.blk", "msgs") // the first round: every block, and the directory
	round()                         // nothing appended: nothing to sync
	appendTo := func(name string) {
		fh, err := os.OpenFile(filepath.Join(msgs, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fh.WriteString("more")
		fh.Close()
	}
	appendTo("2.blk")
	round("2.blk") // the newest block grew
	appendTo("2.blk")
	appendTo("3.blk")
	appendTo("4.blk")
	round("2.blk", "3.blk", "4.blk", "msgs") // the old newest, the new ones, the directory
	round()
	appendTo("4.blk")
	f.fsync = func(string) error { return errors.New("EIO") }
	if err := f.Sync(); err == nil || err.Error() != "EIO" {
		t.Fatalf("a round whose fsync fails: %v, want its error", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
