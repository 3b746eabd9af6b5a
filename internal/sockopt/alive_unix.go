//go:build unix

package sockopt

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Peek looks at an idle connection's socket without reading or blocking:
// a non-blocking recv(MSG_PEEK) that finds nothing to read yet (EAGAIN)
// means Quiet, data means Unread, and 0 bytes (the peer's FIN) or another
// error means Closed.
func Peek(c syscall.RawConn) IdleState {
	state := Quiet
	var buf [1]byte
	// Control, not Read: a reader may hold the read lock while blocked
	// (net/http's read loop does), and MSG_DONTWAIT keeps this from waiting.
	err := c.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR):
		case err != nil || n == 0:
			state = Closed
		default:
			state = Unread
		}
	})
	if err != nil {
		return Closed
	}
	return state
}
