// Package filesync writes the files orderly keeps outside NATS (secrets,
// configuration fragments, a backup's manifest) so that they survive a
// power loss once the call returns: synced before a rename makes them
// visible, and their directory synced after, so that the name stays too.
// A new file renamed into place unsynced can be empty after a power loss on
// ext4 and others: the rename reaches the disk before the data.
//
// It imports nothing of orderly.
package filesync

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CheckWritable tells, before the work whose result goes there, whether
// WriteFile could write path: path is not a directory, and its directory
// takes a new file (one is made and removed again, named as WriteFile
// names its temporary file).
func CheckWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary name means nothing to the user
		}
		return fmt.Errorf("cannot write a file in %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// tempPattern names the temporary file of a write of path, beside it.
func tempPattern(path string) string { return "." + filepath.Base(path) + ".tmp-*" }

// WriteFile writes data to path with mode (umask not applied) atomically
// and durably: a reader, and the disk after a power loss, sees the old file
// or the whole new one, never a part.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, nil)
}

// writeFile is WriteFile, with prepare (when not nil) run on the temporary
// file before it is synced.
func writeFile(path string, data []byte, mode os.FileMode, prepare func(*os.File) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil && prepare != nil {
		err = prepare(tmp)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// ReplaceFile is WriteFile for a file that exists, written again with its
// mode, its owner and its group, at the file a symbolic link path names
// (the link stays). A file that is not there, or not a regular file, is
// refused.
func ReplaceFile(path string, data []byte) error {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(target)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return writeFile(target, data, fi.Mode().Perm(), func(f *os.File) error { return chownLike(f, fi) })
}

// SyncDir syncs directory dir, so that the names of the files created,
// renamed or removed in it survive a power loss.
func SyncDir(dir string) error { return syncPath(dir) }

// SyncFiles syncs every regular file directly in dir, then dir itself: what
// another writer (a library) put there is then on the disk.
func SyncFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := syncPath(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return SyncDir(dir)
}

// syncPath syncs the file or directory at path.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
