package proxy

import (
	"net"
	"sync"
)

// limitListener accepts at most n connections open at once, as
// golang.org/x/net/netutil.LimitListener does, and its connections give
// their socket (NetConn): a tunnel relays between two *net.TCPConn, which
// io.Copy splices on Linux. netutil's hides it, and a relay through it
// copies every byte through user space (measured: no splice call at all).
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free place, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

// Close closes the listener and ends a wait for a free place.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// limitConn holds its listener's place until it is closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn is the connection's socket.
func (c *limitConn) NetConn() net.Conn { return c.Conn }
