//go:build unix

package filesync

import (
	"os"
	"syscall"
)

// chownLike gives f the owner and group of fi's file, where the process
// may (root may; another user only keeps its own): a file replaced by a
// root shell stays readable by the user that read it before.
func chownLike(f *os.File, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid() {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}
