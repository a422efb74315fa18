package datadir_test

import (
	"errors"
	"os"
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
