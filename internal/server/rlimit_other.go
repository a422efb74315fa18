//go:build !unix

package server

// fileLimit has no RLIMIT_NOFILE to read here; assume a common default.
func fileLimit() int { return 8192 }
