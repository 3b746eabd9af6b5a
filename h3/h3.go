// Package h3 lets an intents.Transport speak HTTP/3: a Dialer that opens
// quic-go HTTP/3 connections over the UDP socket the Transport bound to
// the chosen path.
//
//	tr := &intents.Transport{Manager: m, HTTP3: &h3.Dialer{}}
//
// It is a package of its own so that programs that never speak HTTP/3 do
// not build QUIC: the intents package itself does not import quic-go.
package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/h3conn"
)

// Dialer opens HTTP/3 connections for an intents.Transport (its HTTP3
// field). The zero Dialer uses quic-go's defaults.
type Dialer struct {
	// QUICConfig configures the QUIC connections (nil: quic-go's
	// defaults: a 5 s handshake idle timeout, 30 s idle timeout).
	QUICConfig *quic.Config
	// MaxResponseHeaderBytes and DisableCompression are as
	// http3.Transport's.
	MaxResponseHeaderBytes int
	DisableCompression     bool
}

var _ intents.HTTP3Dialer = (*Dialer)(nil)

// DialHTTP3 opens an HTTP/3 connection to remote over pc and returns once
// its handshake is done (see intents.HTTP3Dialer). The connection owns pc:
// closing it, or a failed dial, closes pc.
func (d *Dialer) DialHTTP3(ctx context.Context, pc net.PacketConn, remote netip.AddrPort, tlsConf *tls.Config) (h3conn.Conn, error) {
	tr := &quic.Transport{Conn: onPath(pc)}
	qc, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(remote), tlsConf, d.QUICConfig)
	if err != nil {
		tr.Close()
		pc.Close()
		return nil, err
	}
	h := &http3.Transport{MaxResponseHeaderBytes: d.MaxResponseHeaderBytes, DisableCompression: d.DisableCompression}
	c := &conn{qc: qc, cc: h.NewClientConn(qc)}
	c.paths = []pathSocket{{tr, pc}}
	return c, nil
}

// conn is one HTTP/3 connection and the QUIC transports it alone uses:
// the one it was dialed on, and one per path it migrated to.
type conn struct {
	qc       *quic.Conn
	cc       *http3.ClientConn
	unusable atomic.Pointer[error] // why it can take no more requests (a GOAWAY)

	mu     sync.Mutex
	paths  []pathSocket
	closed bool
}

// pathSocket is a QUIC transport and its socket. It is closed only with
// the connection: quic-go ends every connection a transport it closes
// carried.
type pathSocket struct {
	tr *quic.Transport
	pc net.PacketConn
}

func (c *conn) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.cc.RoundTrip(req)
	if err == nil {
		if resp.Body != nil && resp.Body != http.NoBody {
			resp.Body = cutBody{resp.Body}
		}
		return resp, nil
	}
	if notProcessed(err) {
		c.unusable.CompareAndSwap(nil, &err)
		return nil, fmt.Errorf("%w: %w", intents.ErrUnprocessed, err)
	}
	return nil, err
}

// cutBody is a response body that, when its connection ended before the
// body (the server closed it, a stateless reset said it lost it in a
// restart, or it went silent for the idle timeout), fails with an error
// that matches io.ErrUnexpectedEOF, as an HTTP/1.1 body cut short does:
// the Transport then asks for the rest by range where it can, as it does
// over TCP. quic-go's error stays in the chain.
type cutBody struct{ io.ReadCloser }

func (b cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var appErr *quic.ApplicationError
	var reset *quic.StatelessResetError
	var idle *quic.IdleTimeoutError
	if errors.As(err, &appErr) && appErr.Remote || errors.As(err, &reset) || errors.As(err, &idle) {
		err = &cutError{err}
	}
	return n, err
}

// cutError is the error of a body its server cut short: quic-go's, and
// io.ErrUnexpectedEOF.
type cutError struct{ err error }

func (e *cutError) Error() string   { return e.err.Error() }
func (e *cutError) Unwrap() []error { return []error{e.err, io.ErrUnexpectedEOF} }

// notProcessed reports whether err says the server has not processed the
// request: no stream was opened (quic-go's unexported errConnUnusable:
// after a GOAWAY, or on a closed connection), or the server rejected the
// stream with H3_REQUEST_REJECTED.
func notProcessed(err error) bool {
	var h3err *http3.Error
	if errors.As(err, &h3err) && h3err.Remote && h3err.ErrorCode == http3.ErrCodeRequestRejected {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if fmt.Sprintf("%T", e) == "*http3.errConnUnusable" {
			return true
		}
	}
	return false
}

func (c *conn) Err() error {
	if err := context.Cause(c.qc.Context()); err != nil {
		return err
	}
	if err := c.unusable.Load(); err != nil {
		return *err
	}
	return nil
}

func (c *conn) Close() error {
	err := c.qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	c.mu.Lock()
	c.closed = true
	paths := c.paths
	c.paths = nil
	c.mu.Unlock()
	for _, p := range paths {
		p.tr.Close()
		p.pc.Close()
	}
	return err
}

// AddPath probes pc's path for the connection (see
// h3conn.Conn.AddPath): a PATH_CHALLENGE there, answered. The
// *quic.Path it returns switches the connection there.
func (c *conn) AddPath(ctx context.Context, pc net.PacketConn) (h3conn.Path, error) {
	tr := &quic.Transport{Conn: onPath(pc)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		pc.Close()
		return nil, net.ErrClosed
	}
	c.paths = append(c.paths, pathSocket{tr, pc})
	c.mu.Unlock()
	path, err := c.qc.AddPath(tr)
	if err != nil {
		return nil, err
	}
	if err := path.Probe(ctx); err != nil {
		path.Close()
		return nil, err
	}
	return path, nil
}

// onPath is the socket quic-go is given for pc: a datagram the system
// refuses to send because the path's link went down or its address went
// away is reported sent (and so lost, as it would be a hop later): quic-go
// ends a connection on any error sending, and the connection is to move
// to another path instead (see Migrate).
func onPath(pc net.PacketConn) net.PacketConn {
	switch c := pc.(type) {
	case *net.UDPConn:
		return pathConn{c}
	case *intents.PacketConn:
		return pathConn{c.UDPConn}
	}
	return pc
}

// pathConn is a UDP socket that drops what it cannot send for want of a
// path (see onPath). It keeps all of *net.UDPConn's methods: quic-go uses
// ReadMsgUDP and WriteMsgUDP for ECN and GSO.
type pathConn struct{ *net.UDPConn }

func (c pathConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	n, oobn, err := c.UDPConn.WriteMsgUDP(b, oob, addr)
	if pathGone(err) {
		return len(b), len(oob), nil
	}
	return n, oobn, err
}

func (c pathConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	n, err := c.UDPConn.WriteTo(b, addr)
	if pathGone(err) {
		return len(b), nil
	}
	return n, err
}

// pathGone reports whether a send failed because the socket's path is
// down or gone.
func pathGone(err error) bool {
	for _, errno := range []syscall.Errno{syscall.ENETDOWN, syscall.ENETUNREACH, syscall.EHOSTUNREACH,
		syscall.EADDRNOTAVAIL, syscall.ENODEV, syscall.ENXIO} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

func (c *conn) LocalAddr() net.Addr  { return c.qc.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr { return c.qc.RemoteAddr() }
func (c *conn) Stats() h3conn.Stats {
	st := c.qc.ConnectionStats()
	return h3conn.Stats{SmoothedRTT: st.SmoothedRTT, BytesSent: st.BytesSent, BytesReceived: st.BytesReceived}
}

// reservedStreamType is a unidirectional stream type reserved for
// greasing (RFC 9114 section 6.2.3: 0x1f * N + 0x21): a server ignores
// such a stream, and acknowledges its packet like any other.
const reservedStreamType = 0x21

// Probe sends a packet the server acknowledges: a stream of a reserved
// type, one byte long (see h3conn.Conn.Probe).
func (c *conn) Probe() error {
	str, err := c.qc.OpenUniStream()
	if err != nil {
		return err
	}
	if _, err := str.Write([]byte{reservedStreamType}); err != nil {
		str.CancelWrite(0)
		return err
	}
	return str.Close()
}
