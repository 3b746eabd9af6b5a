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
	line         []byte // the current line's start, up to maxField bytes
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
	c.watch(p[:n])
	return n, err
}

// watch reads b, the next bytes the client sent, a line at a time:
// bytes.IndexByte finds the line ends, and only a line's start is kept
// and looked at, so that an upload costs little more than the search.
func (c *framingConn) watch(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if room := maxField - len(c.line); room > 0 {
			c.line = append(c.line, part[:min(room, len(part))]...)
		}
		c.n += len(part)
		if i < 0 {
			return
		}
		c.endLine()
		b = b[i+1:]
	}
}

// endLine ends the current line: a blank one ends a head, one that
// starts with either field's name marks it.
func (c *framingConn) endLine() {
	switch {
	case c.n == 0 || c.n == 1 && c.line[0] == '\r':
		c.sawTE, c.sawCL = false, false
	case hasFieldPrefix(c.line, teField):
		c.sawTE = true
	case hasFieldPrefix(c.line, clField):
		c.sawCL = true
	}
	if c.sawTE && c.sawCL {
		c.both.Store(true)
	}
	c.line, c.n = c.line[:0], 0
}

func hasFieldPrefix(line, field []byte) bool {
	return len(line) >= len(field) && bytes.EqualFold(line[:len(field)], field)
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
