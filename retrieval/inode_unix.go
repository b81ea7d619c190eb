//go:build unix

package retrieval

import (
	"io/fs"
	"syscall"
)

// inodeOf is the file's inode number: a save renames a new file into place,
// which changes it even when size and mtime happen to match.
func inodeOf(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
