//go:build !unix

package proxy

import "os"

// ownedByMe reports whether fi is of a file this process's user owns:
// where files have no owner this package can read, it is taken to be.
func ownedByMe(os.FileInfo) bool { return true }
