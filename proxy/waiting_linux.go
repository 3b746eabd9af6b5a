package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// canTellWaiting: bytesWaiting asks the socket.
const canTellWaiting = true

// bytesWaiting reports whether c's socket holds bytes not read yet.
func bytesWaiting(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}
