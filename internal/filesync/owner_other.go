//go:build !unix

package filesync

import "os"

// chownLike does nothing where files have no Unix owner.
func chownLike(*os.File, os.FileInfo) error { return nil }
