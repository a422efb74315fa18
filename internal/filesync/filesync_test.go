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
