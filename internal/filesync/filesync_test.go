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

// TestReplaceFile: the file is written again with its mode, and its owner
// when the process may give it (root); a symbolic link stays one, to the
// file written again; a missing file, or a directory, is refused.
func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	owned := os.Geteuid() == 0
	if owned {
		if err := os.Chown(path, 4321, 4322); err != nil {
			t.Fatal(err)
		}
	}
	if err := filesync.ReplaceFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if got, _ := os.ReadFile(path); err != nil || string(got) != "new" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("replaced: %q, mode %v, %v", got, fi.Mode().Perm(), err)
	}
	if st := fi.Sys().(*syscall.Stat_t); owned && (st.Uid != 4321 || st.Gid != 4322) {
		t.Errorf("owner %d:%d, want 4321:4322 as before", st.Uid, st.Gid)
	}
	// A secret mounted as a link (Kubernetes: tokens -> ..data/tokens).
	link := filepath.Join(dir, "link")
	if err := os.Symlink("tokens", link); err != nil {
		t.Fatal(err)
	}
	if err := filesync.ReplaceFile(link, []byte("newer")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link is no longer one: %v, %v", fi.Mode(), err)
	}
	if got, _ := os.ReadFile(path); string(got) != "newer" {
		t.Errorf("the link's file holds %q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the directory holds %d entries, want the file and the link", len(entries))
	}
	if err := filesync.ReplaceFile(filepath.Join(dir, "missing"), []byte("x")); err == nil {
		t.Error("a missing file was written")
	}
	if err := filesync.ReplaceFile(dir, []byte("x")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}
