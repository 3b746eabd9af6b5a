//go:build unix

package sockopt

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Alive reports whether an idle connection is still open: a non-blocking
// recv(MSG_PEEK) that finds data or nothing to read yet (EAGAIN) means
// open; 0 bytes (the peer's FIN) or another error means closed.
func Alive(c syscall.RawConn) bool {
	alive := true
	var buf [1]byte
	// Control, not Read: a reader may hold the read lock while blocked
	// (net/http's read loop does), and MSG_DONTWAIT keeps this from waiting.
	err := c.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR):
		case err != nil || n == 0:
			alive = false
		}
	})
	return alive && err == nil
}
