//go:build unix

package proxy

import (
	"os"
	"syscall"
)

// ownedByMe reports whether fi is of a file this process's user owns.
func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || int(st.Uid) == os.Geteuid()
}
