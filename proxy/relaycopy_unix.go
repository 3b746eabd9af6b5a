//go:build unix

package proxy

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// relayCopy copies src to dst until src's end or an error, as io.Copy
// does: between two TCP sockets by splice(2) where the kernel has it
// (spliceCopy), else through user space (readLending).
func relayCopy(dst io.Writer, src io.Reader) (int64, error) {
	if n, handled, err := spliceCopy(dst, src); handled {
		return n, err
	}
	return readLending(dst, src)
}

// readLending copies src to dst through a lent buffer taken only once src
// has bytes to read and given back after each write: a quiet tunnel holds
// none, so the buffers' memory is bounded by the tunnels moving bytes, not
// by those open.
func readLending(dst io.Writer, src io.Reader) (int64, error) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		return copyHolding(dst, src)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return copyHolding(dst, src)
	}
	var written int64
	for {
		var (
			buf  *[]byte
			n    int
			rerr error
		)
		// The socket is non-blocking: a read that finds nothing gives the
		// buffer back, and RawConn.Read waits (deadlines included) for the
		// socket to be readable before trying again.
		err := rc.Read(func(fd uintptr) bool {
			buf = getRelayBuffer()
			for {
				n, rerr = unix.Read(int(fd), *buf)
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				putRelayBuffer(buf)
				buf = nil
				return false
			}
			return true
		})
		switch {
		case err != nil:
			return written, err
		case rerr != nil:
			putRelayBuffer(buf)
			return written, os.NewSyscallError("read", rerr)
		case n <= 0:
			putRelayBuffer(buf)
			return written, nil // the peer's end
		}
		w, werr := dst.Write((*buf)[:n])
		putRelayBuffer(buf)
		written += int64(w)
		if werr != nil {
			return written, werr
		}
	}
}
