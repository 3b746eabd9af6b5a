package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sockintents/intents"
)

// ErrTransparentUnsupported is ServeTransparent's error where the system
// does not tell a redirected connection's original destination.
var ErrTransparentUnsupported = errors.New("proxy: transparent listeners need Linux (SO_ORIGINAL_DST)")

// sniffWait is how long a redirected connection is given to send its
// first bytes before it is placed without a name: a protocol in which
// the server speaks first (SMTP, FTP) sends nothing.
const sniffWait = 250 * time.Millisecond

// maxSniff bounds what is read of a connection to find its name: a TLS
// ClientHello, an HTTP request's head.
const maxSniff = 16 << 10

// ServeTransparent serves connections that a packet filter redirected to
// l (nftables' redirect, iptables' REDIRECT) from programs that know
// nothing of a proxy. Each is placed like a tunnel to its original
// destination (SO_ORIGINAL_DST), with intents in, by the name its first
// bytes carry where they carry one (a TLS ClientHello's server name, an
// HTTP request's Host) and the host's resolver says the original
// destination is one of its addresses, so that each path resolves the
// name itself and rules by name apply; else by the address (a program
// reaches no other host than the one its connection went to). The destination policy, the
// client limits and the tunnel limits hold as for CONNECT. It returns
// when l fails or Close is called (ErrServerClosed); where the system
// cannot tell original destinations (all but Linux), at once with
// ErrTransparentUnsupported.
func (s *Server) ServeTransparent(l net.Listener, in intents.Intents) error {
	if !originalDstSupported {
		l.Close()
		return ErrTransparentUnsupported
	}
	return s.serveConns(l, "", func(c net.Conn) { s.serveTransparent(c, in) })
}

func (s *Server) serveTransparent(c net.Conn, in intents.Intents) {
	ctx := context.Background()
	if !s.allowed(c.RemoteAddr().String()) {
		return // no protocol to say why in
	}
	dst, err := originalDst(rawConn(c))
	if err != nil || s.isListener(dst) {
		// Not redirected: a client that came to the listener itself.
		s.transparentLog(ctx, c, dst, "", errors.Join(errLoop, err))
		return
	}
	name, head := sniffName(c, orDefault(s.ReadHeaderTimeout, DefaultReadHeaderTimeout))
	host := transparentHost(ctx, name, dst.Addr(), lookupHost)
	if _, err := s.checkDestination(host, dst.Port()); err != nil {
		s.transparentLog(ctx, c, dst, name, err)
		return
	}
	if !s.AllowLocal && isLocalAddr(dst.Addr()) {
		s.transparentLog(ctx, c, dst, name, ErrLocalDestination)
		return
	}
	client := shareOf(c.RemoteAddr().String())
	if err := s.takeTunnel(client, ownedByHost(c.RemoteAddr().String())); err != nil {
		s.transparentLog(ctx, c, dst, name, err)
		return
	}
	defer s.endTunnel(client)
	up, err := s.dialTunnel(ctx, host, dst.Port(), s.destIntents(in, host))
	if err != nil {
		s.transparentLog(ctx, c, dst, name, err)
		return
	}
	c.SetDeadline(time.Time{})
	releasePlace(c) // MaxTunnels counts it now
	replay := bufio.NewReaderSize(bytes.NewReader(head), max(len(head), 16))
	replay.Peek(len(head))
	s.relay(ctx, c, replay, up, host)
}

// lookupHost is the host's resolver, which the redirected program used
// too; a variable for tests.
var lookupHost = func(ctx context.Context, name string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
}

// nameCheckTimeout bounds the lookup that checks a redirected
// connection's name against its destination.
const nameCheckTimeout = 2 * time.Second

// transparentHost is what a redirected connection to dst, whose first
// bytes named name (""), is placed and dialed by: name, if lookup says
// dst is one of its addresses; else dst's address. A name that does not
// lead there would take the program, through the proxy, to another host
// than the one it connected to, past whatever keeps it from that host
// (squid forwards such a connection to its original address too).
func transparentHost(ctx context.Context, name string, dst netip.Addr, lookup func(context.Context, string) ([]netip.Addr, error)) string {
	if name == "" {
		return dst.String()
	}
	ctx, cancel := context.WithTimeout(ctx, nameCheckTimeout)
	defer cancel()
	addrs, err := lookup(ctx, name)
	if err == nil && slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Unmap() == dst.Unmap() }) {
		return name
	}
	return dst.String()
}

// sniffName reads the start of what a client sends, for the name it is
// for: a TLS ClientHello's server name or an HTTP request's Host (""
// if neither, or no name but an address). head is what was read, to be
// sent on before the rest.
func sniffName(c net.Conn, timeout time.Duration) (name string, head []byte) {
	c.SetReadDeadline(time.Now().Add(sniffWait))
	first := make([]byte, 1)
	if n, _ := c.Read(first); n == 0 {
		return "", nil // nothing yet: the server may speak first
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	rec := &recordingConn{Conn: c, buf: bytes.NewBuffer(first)}
	rec.r = io.LimitReader(io.MultiReader(bytes.NewReader(first), teeReader{c, rec.buf}), maxSniff)
	if first[0] == 0x16 { // a TLS handshake record
		tls.Server(rec, &tls.Config{GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			name = hello.ServerName
			return nil, errSniffed
		}}).Handshake()
	} else if req, err := http.ReadRequest(bufio.NewReader(rec)); err == nil {
		name, _ = splitHostPort(req.Host, 0)
	}
	if _, err := netip.ParseAddr(name); err == nil || checkHostPattern(name) != nil || strings.Contains(name, "*") {
		name = ""
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")), rec.buf.Bytes()
}

// errSniffed ends a handshake begun only to read the ClientHello.
var errSniffed = errors.New("proxy: ClientHello read")

// recordingConn is a client connection read through r (which keeps what
// it reads in buf), and to which nothing is written: a handshake begun
// to read a ClientHello must not answer.
type recordingConn struct {
	net.Conn
	r   io.Reader
	buf *bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *recordingConn) Write(p []byte) (int, error) { return len(p), nil }

// teeReader reads from r and keeps what it read in w.
type teeReader struct {
	r io.Reader
	w *bytes.Buffer
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.w.Write(p[:n])
	return n, err
}

func (s *Server) transparentLog(ctx context.Context, c net.Conn, dst netip.AddrPort, name string, err error) {
	if s.Logger == nil {
		return
	}
	s.Logger.Log(ctx, slog.LevelInfo, "proxy: transparent connection refused", "client", c.RemoteAddr().String(),
		"dst", dst.String(), "name", name, "err", err)
}
