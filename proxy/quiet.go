package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/tcpinfo"
)

// DefaultTunnelIdleTimeout closes a tunnel quiet both ways this long, as
// squid's read_timeout does.
const DefaultTunnelIdleTimeout = 5 * time.Minute

// quietFunc tells how long a tunnel has carried no byte either way.
type quietFunc func() time.Duration

// kernelQuiet reads how long a TCP socket of the tunnel has neither sent
// nor received data from the kernel (TCP_INFO), so that the relay can
// keep splicing and count nothing itself; false where the kernel does
// not tell (another OS, not a TCP socket).
func kernelQuiet(c net.Conn) (quietFunc, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	if _, err := tcpinfo.Get(rc); err != nil {
		return nil, false
	}
	return func() time.Duration {
		ti, err := tcpinfo.Get(rc)
		if err != nil {
			return 0 // closed: the relay is ending anyway
		}
		return min(ti.LastDataRecv, ti.LastDataSent)
	}, true
}

// activity stamps the time of each read through its readers, for a
// tunnel whose sockets the kernel cannot be asked about.
type activity struct{ last atomic.Int64 }

func newActivity() *activity {
	a := &activity{}
	a.last.Store(time.Now().UnixNano())
	return a
}

func (a *activity) quiet() time.Duration {
	return time.Since(time.Unix(0, a.last.Load()))
}

// reader stamps each read from r that brings bytes.
func (a *activity) reader(r io.Reader) io.Reader { return stampReader{r, a} }

type stampReader struct {
	r io.Reader
	a *activity
}

func (s stampReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.a.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// closeWhenQuiet calls end once quiet reports the tunnel idle for
// timeout (zero or less: never), checking when it could first be; stop
// ends the watch.
func closeWhenQuiet(timeout time.Duration, quiet quietFunc, end func()) (stop func()) {
	if timeout <= 0 {
		return func() {}
	}
	var mu sync.Mutex
	var t *time.Timer
	stopped := false
	check := func() {
		q := quiet()
		mu.Lock()
		if stopped || q < timeout {
			if !stopped {
				t.Reset(timeout - q)
			}
			mu.Unlock()
			return
		}
		stopped = true
		mu.Unlock()
		end()
	}
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(timeout, check)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}
