package filesync_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/orderly-dev/orderly/internal/filesync"
)

// TestWriteFile: the file holds the data with the mode asked for, whatever
// the umask; a second write replaces it whole, mode included; no temporary
// file is left; a missing directory is an error that names the path.
func TestWriteFile(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "api.nk")
	check := func(data string, mode os.FileMode) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read back: %q, %v; want %q", got, err, data)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("mode %v, %v; want %v", fi.Mode().Perm(), err, mode)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("the directory holds %d entries, want the file alone", len(entries))
		}
	}
	if err := filesync.WriteFile(path, []byte("SUA-first"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("SUA-first", 0o644)
	if err := filesync.WriteFile(path, []byte("SUA-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("SUA-2", 0o600)
	missing := filepath.Join(dir, "no-such-dir", "x")
	if err := filesync.WriteFile(missing, []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), "no-such-dir") {
		t.Fatalf("a missing directory: %v", err)
	}
}

// TestSyncFiles: every file of a directory and the directory are synced;
// a missing directory is an error.
func TestSyncFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"stream.tar.s2", "backup.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := filesync.SyncFiles(dir); err != nil {
		t.Fatal(err)
	}
	if err := filesync.SyncFiles(filepath.Join(dir, "gone")); err == nil {
		t.Fatal("a missing directory: no error")
	}
}

// TestCheckWritable: a path WriteFile could write passes and leaves
// nothing behind; a directory, a missing directory and one that takes no
// new file are refused, naming the directory without a temporary name.
func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	if err := filesync.CheckWritable(filepath.Join(dir, "r.json")); err != nil {
		t.Fatalf("a new file in a writable directory: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the check left %d files", len(left))
	}
	for path, want := range map[string]string{
		dir:                                     "is a directory",
		filepath.Join(dir, "missing", "r.json"): "cannot write a file in " + filepath.Join(dir, "missing") + ": no such file or directory",
	} {
		if err := filesync.CheckWritable(path); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), ".tmp-") {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}
