//go:build unix

package server

import "syscall"

// fileLimit is the process's soft limit of open files (Go raises it to the
// hard limit at start).
func fileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<20 {
		return 1 << 20
	}
	return int(l.Cur)
}
