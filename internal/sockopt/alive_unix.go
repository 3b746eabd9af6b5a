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
	err := c.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK):
		case err != nil || n == 0:
			alive = false
		}
		return true // never wait for readiness
	})
	return alive && err == nil
}
