package proxy

import (
	"bytes"
	"net"
	"sync/atomic"
)

// framingConn watches what an HTTP/1 client sends for a request head
// that carries both Transfer-Encoding and Content-Length. net/http drops
// the Content-Length of such a request before a handler sees it (the
// Transfer-Encoding frames the body), but RFC 9112 §6.1 asks the server
// to close the connection after answering it: the client, or a proxy in
// front, may have framed the body by its length, and what follows on the
// connection cannot be trusted to be the next request.
//
// It reads lines, not requests: a body whose lines look like both
// fields within one block also marks the connection, which then closes
// after its next response; harmless, and rare.
type framingConn struct {
	net.Conn
	line         []byte // the current line's start, lower case, up to maxField bytes
	n            int    // the current line's length
	sawTE, sawCL bool   // in the current block of lines
	both         atomic.Bool
}

// maxField is the longest field name it looks for, with its colon.
const maxField = len("transfer-encoding:")

var (
	teField = []byte("transfer-encoding:")
	clField = []byte("content-length:")
)

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for _, b := range p[:n] {
		c.scan(b)
	}
	return n, err
}

func (c *framingConn) scan(b byte) {
	switch b {
	case '\r':
		return
	case '\n':
		if c.n == 0 { // a blank line ends a head
			c.sawTE, c.sawCL = false, false
			return
		}
		switch {
		case bytes.HasPrefix(c.line, teField):
			c.sawTE = true
		case bytes.HasPrefix(c.line, clField):
			c.sawCL = true
		}
		if c.sawTE && c.sawCL {
			c.both.Store(true)
		}
		c.line, c.n = c.line[:0], 0
		return
	}
	c.n++
	if len(c.line) < maxField {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		c.line = append(c.line, b)
	}
}

// NetConn is the connection under the watch.
func (c *framingConn) NetConn() net.Conn { return c.Conn }

// framingListener watches each connection it accepts (see framingConn).
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c, line: make([]byte, 0, maxField)}, nil
}

// ambiguousFraming reports, once, whether the client connection of a
// request just read sent a head with both Transfer-Encoding and
// Content-Length.
func ambiguousFraming(c net.Conn) bool {
	fc, ok := c.(*framingConn)
	return ok && fc.both.Swap(false)
}
