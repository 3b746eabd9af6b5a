package proxy

import (
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// spliceCopy copies between two TCP sockets without the bytes entering
// user space: splice(2) from src into a pipe, then from the pipe into
// dst. It reports whether it handled the copy (both ends are TCP
// sockets); if not, it has moved nothing.
//
// Unlike the standard library's splice (TCPConn.ReadFrom), which holds a
// pipe for as long as the copy lasts, two descriptors a direction even on
// a quiet tunnel, a pipe is lent only once src has bytes to read and
// given back once they are written: the pipes of a thousand idle tunnels
// are none.
func spliceCopy(dst io.Writer, src io.Reader) (written int64, handled bool, err error) {
	from, ok := src.(*net.TCPConn)
	if !ok {
		return 0, false, nil
	}
	to, ok := dst.(*net.TCPConn)
	if !ok {
		return 0, false, nil
	}
	rc, err := from.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	wc, err := to.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	for {
		var (
			p          *relayPipe
			n          int64
			perr, serr error
		)
		// The socket is non-blocking: a splice that finds nothing gives
		// the pipe back, and RawConn.Read waits (deadlines included) for
		// the socket to be readable before trying again.
		err := rc.Read(func(fd uintptr) bool {
			if p, perr = getRelayPipe(); perr != nil {
				return true
			}
			for {
				n, serr = unix.Splice(int(fd), nil, p.w, nil, relayPipeSize, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if serr != unix.EINTR {
					break
				}
			}
			if serr == unix.EAGAIN {
				putRelayPipe(p)
				p = nil
				return false
			}
			return true
		})
		switch {
		case err != nil:
			return written, true, err
		case perr != nil:
			// Out of descriptors for a pipe: the rest goes through user
			// space rather than cut the tunnel.
			m, err := readLending(dst, src)
			return written + m, true, err
		case serr != nil:
			putRelayPipe(p)
			return written, true, os.NewSyscallError("splice", serr)
		case n <= 0:
			putRelayPipe(p)
			return written, true, nil // the peer's end
		}
		p.held = n
		var werr error
		err = wc.Write(func(fd uintptr) bool {
			for p.held > 0 {
				m, e := unix.Splice(p.r, nil, int(fd), nil, int(p.held), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				switch {
				case e == unix.EINTR:
					continue
				case e == unix.EAGAIN:
					return false // dst is full: wait until it is writable
				case e != nil:
					werr = os.NewSyscallError("splice", e)
					return true
				case m <= 0:
					werr = io.ErrShortWrite
					return true
				}
				p.held -= m
				written += m
				relaySpliced.Add(m)
			}
			return true
		})
		putRelayPipe(p)
		if err == nil {
			err = werr
		}
		if err != nil {
			return written, true, err
		}
	}
}

// relayPipeSize is what a lent pipe holds at most: the bytes a tunnel
// whose reader stalls keeps in the kernel beyond its sockets' buffers.
const relayPipeSize = 1 << 20

// relayPipe is a pipe lent to one direction of a tunnel while bytes move
// through it; held counts the bytes in it.
type relayPipe struct {
	r, w int
	held int64
}

// maxIdlePipes bounds the pipes kept for the next tunnel that has bytes
// to move: the descriptors a proxy holds beyond its sockets.
const maxIdlePipes = 16

// relayPipes keeps the idle pipes (an empty pipe holds no memory).
var relayPipes struct {
	sync.Mutex
	idle []*relayPipe
}

func getRelayPipe() (*relayPipe, error) {
	relayPipes.Lock()
	if n := len(relayPipes.idle); n > 0 {
		p := relayPipes.idle[n-1]
		relayPipes.idle = relayPipes.idle[:n-1]
		relayPipes.Unlock()
		relayPipesOut.Add(1)
		return p, nil
	}
	relayPipes.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	// As large as the standard library's: a 64 kB pipe takes half as much
	// CPU again per byte in splices and wake-ups. Where the kernel refuses
	// (a user over its pipe pages), the pipe keeps its default size.
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, relayPipeSize)
	relayPipesOut.Add(1)
	return &relayPipe{r: fds[0], w: fds[1]}, nil
}

// putRelayPipe gives p back, or closes it if bytes are left in it (a
// write failed) or enough pipes are idle.
func putRelayPipe(p *relayPipe) {
	relayPipesOut.Add(-1)
	if p.held == 0 {
		relayPipes.Lock()
		if len(relayPipes.idle) < maxIdlePipes {
			relayPipes.idle = append(relayPipes.idle, p)
			relayPipes.Unlock()
			return
		}
		relayPipes.Unlock()
	}
	unix.Close(p.r)
	unix.Close(p.w)
}
