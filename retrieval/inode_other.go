//go:build !unix

package retrieval

import "io/fs"

// inodeOf is 0 where the platform has no inode in its FileInfo: a replaced
// index file is then told by its size and mtime alone.
func inodeOf(fs.FileInfo) uint64 { return 0 }
