package datadir_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/datadir"
)

func TestSecondLockIsRefusedAndNamesTheHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = datadir.Acquire(dir)
	if !errors.Is(err, datadir.ErrInUse) {
		t.Fatalf("second lock: %v, want ErrInUse", err)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("%v does not name the holder", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	_ = l2.Release()
}

// TestDirectoryThatCannotBeMadeNamesTheFlag: a data directory that is a
// file (or cannot be made) is refused naming the flag that set it.
func TestDirectoryThatCannotBeMadeNamesTheFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := datadir.Acquire(file)
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a data directory that is a file: %v, want it refused naming --data-dir", err)
	}
}
