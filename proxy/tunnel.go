package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/sockopt"
)

// connect serves a CONNECT request: a tunnel to its authority.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, in intents.Intents) {
	host, port := splitHostPort(r.Host, 0)
	if host == "" || port == 0 {
		s.refuse(w, r, http.StatusBadRequest, "CONNECT needs host:port")
		return
	}
	if status, err := s.checkDestination(host, port); err != nil {
		s.refuse(w, r, status, "CONNECT: "+err.Error())
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok && r.ProtoMajor < 2 {
		s.refuse(w, r, http.StatusInternalServerError, "the connection cannot be taken over for a tunnel")
		return
	}
	client := shareOf(r.RemoteAddr)
	if err := s.takeTunnel(client, ownedByHost(r.RemoteAddr)); err != nil {
		s.refuse(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer s.endTunnel(client)
	up, err := s.dialTunnel(r.Context(), host, port, in)
	if err != nil {
		status := http.StatusBadGateway
		if isTimeout(err) {
			status = http.StatusGatewayTimeout
		}
		if errors.Is(err, errLoop) {
			status = http.StatusLoopDetected
		}
		if errors.Is(err, ErrLocalDestination) {
			status = http.StatusForbidden
		}
		s.refuse(w, r, status, err.Error())
		return
	}
	if !ok {
		s.relayStream(w, r, up, host)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		s.log(r.Context(), slog.LevelInfo, "hijack failed", r, err)
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		conn.Close()
		up.Close()
		return
	}
	conn.SetDeadline(time.Time{}) // the server's header timeouts end here
	s.relay(r.Context(), conn, brw.Reader, up, host)
}

// dialTunnel opens a tunnel's connection to host:port through the path
// the policy chooses for in, with the rule's intents for host merged in
// and the size host sent before as the size to expect, unless in says.
func (s *Server) dialTunnel(ctx context.Context, host string, port uint16, in intents.Intents) (net.Conn, error) {
	if in.SizeToBeReceived == 0 {
		in.SizeToBeReceived = s.sizes.predict(host)
	}
	ctx, cancel := context.WithTimeout(intents.WithIntents(ctx, in), orDefault(s.DialTimeout, DefaultDialTimeout))
	defer cancel()
	c, err := s.Dialer.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
	if err != nil {
		s.stats.tunnelFailed()
		return nil, err
	}
	// A name may resolve to the host itself: refused here, where the
	// Dialer has no Control of the Server's, before a byte is sent.
	if err := s.Control("tcp", c.RemoteAddr().String(), nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// relay copies between a client and its tunnel's connection until both
// directions end (each end's close is passed on as a half close), then
// closes both, counts the bytes on the tunnel's path and teaches the
// host's size. buffered holds what the client sent after its request,
// read already.
func (s *Server) relay(ctx context.Context, client net.Conn, buffered *bufio.Reader, up net.Conn, host string) {
	if !s.track(client) {
		up.Close()
		return
	}
	if !s.track(up) {
		s.untrack(client)
		client.Close()
		return
	}
	defer func() {
		s.untrack(client)
		s.untrack(up)
		client.Close()
		up.Close()
	}()
	path, _ := intents.PathOf(up)
	raw, rawClient := rawConn(up), rawConn(client)
	defer s.endOnPathDown(client, path, raw)()
	// Quiet both ways for the idle timeout, the tunnel is closed. The
	// kernel tells how long where it can, so that the copies read the
	// sockets themselves (see relayCopy); else each read is stamped.
	var fromClient, fromUp io.Reader = rawClient, raw
	quiet, ok := kernelQuiet(rawClient)
	if !ok {
		quiet, ok = kernelQuiet(raw)
	}
	if !ok {
		a := newActivity()
		quiet, fromClient, fromUp = a.quiet, a.reader(rawClient), a.reader(raw)
	}
	defer closeWhenQuiet(s.tunnelIdleTimeout(), quiet, func() {
		s.logTunnelIdle(ctx, client, host)
		client.Close()
		up.Close()
	})()
	var sent int64
	if n := buffered.Buffered(); n > 0 {
		b, _ := buffered.Peek(n)
		m, err := raw.Write(b)
		sent += int64(m)
		if err != nil {
			return
		}
	}
	upDone := make(chan int64, 1)
	go func() {
		n, _ := relayCopy(raw, fromClient)
		closeWrite(raw)
		upDone <- n
	}()
	received, _ := relayCopy(rawClient, fromUp)
	closeWrite(rawClient)
	// The server is done; a client that keeps its side open past the
	// idle timeout is not waited for.
	client.SetReadDeadline(time.Now().Add(orDefault(s.IdleTimeout, DefaultIdleTimeout)))
	sent += <-upDone
	s.tunnelEnded(ctx, host, path, sent, received)
}

// relayStream is relay for a tunnel on an HTTP/2 stream (RFC 9113
// §8.5): the request's body is what the client sends, the response's what
// it receives. An upstream that fails, or whose path goes down, resets
// the stream, so the client never takes a cut stream for the whole.
func (s *Server) relayStream(w http.ResponseWriter, r *http.Request, up net.Conn, host string) {
	if !s.track(up) {
		return
	}
	defer func() {
		s.untrack(up)
		up.Close()
	}()
	ctx := r.Context()
	// The client resetting its stream (or its connection going) ends the
	// upstream; Close ends both.
	defer context.AfterFunc(ctx, func() { up.Close() })()
	path, _ := intents.PathOf(up)
	raw := rawConn(up)
	defer s.endOnPathDown(up, path, raw)()
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	a := newActivity()
	defer closeWhenQuiet(s.tunnelIdleTimeout(), a.quiet, func() {
		s.logTunnelIdle(ctx, nil, host)
		up.Close() // the copy below fails: the stream is reset
	})()
	upDone := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(raw, a.reader(r.Body))
		closeWrite(raw)
		upDone <- n
	}()
	received, err := io.Copy(flushWriter{w, rc}, a.reader(raw))
	// The stream's response ends only with the handler, so the tunnel ends
	// when the upstream's side does: what the client still sends is not
	// read (closing the body ends the copy above).
	r.Body.Close()
	sent := <-upDone
	s.tunnelEnded(ctx, host, path, sent, received)
	if err != nil && ctx.Err() == nil {
		panic(http.ErrAbortHandler) // resets the stream
	}
}

// tunnelEnded teaches host's size from a tunnel's received bytes, counts
// the tunnel on its path and logs it.
func (s *Server) tunnelEnded(ctx context.Context, host string, path *intents.Path, sent, received int64) {
	s.sizes.learn(host, received)
	s.stats.tunnel(path.String(), sent, received)
	if s.Logger != nil {
		s.Logger.Log(ctx, slog.LevelDebug, "proxy: tunnel", "host", host, "path", path.String(), "sent", sent, "received", received)
	}
}

// flushWriter sends each write of a tunnel's stream at once.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	return n, f.rc.Flush()
}

// endOnPathDown has end closed (reset) when path, a tunnel's, goes down
// or away: an MPTCP tunnel (raw) goes on over its other subflows, a TCP
// one could only hang until TCP gives up. The returned func undoes it.
func (s *Server) endOnPathDown(end net.Conn, path *intents.Path, raw net.Conn) func() {
	if path == nil || sockopt.IsMPTCP(raw) {
		return func() {}
	}
	s.watchPaths()
	s.mu.Lock()
	s.onPath[end] = path.Name
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.onPath, end)
		s.mu.Unlock()
	}
}

// watchPaths starts, once, the watch that resets the tunnels whose path
// went down or away (see resetTunnelsOnDownPaths).
func (s *Server) watchPaths() {
	m := s.Dialer.Manager
	if m == nil {
		return
	}
	s.watchOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		s.wg.Go(func() {
			for {
				select {
				case <-s.done:
					return
				case <-m.Changed():
				}
				s.resetTunnelsOnDownPaths(m)
			}
		})
	})
}

// resetTunnelsOnDownPaths resets both ends of every TCP tunnel whose path
// is down or gone: its client sees a reset at once, not a stream that
// stalls until TCP gives up minutes later.
func (s *Server) resetTunnelsOnDownPaths(m *intents.Manager) {
	var ends []net.Conn
	s.mu.Lock()
	for client, name := range s.onPath {
		if p := m.Path(name); p == nil || !p.Up {
			ends = append(ends, client)
		}
	}
	s.mu.Unlock()
	for _, c := range ends {
		if tc, ok := rawConn(c).(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not an orderly end the client could take for the whole
		}
		c.Close() // the relay then closes the other end, or resets its stream
		if s.Logger != nil {
			s.Logger.Info("proxy: tunnel reset: its path went down", "client", c.RemoteAddr().String())
		}
	}
}

// rawConn is the socket under an intents.Conn, a limitConn or a
// framingConn, so that a tunnel's copies read and write the sockets
// themselves (see relayCopy). Closing stays the wrapper's (it gives back a place, or the
// Manager's accounting).
func rawConn(c net.Conn) net.Conn {
	for {
		switch w := c.(type) {
		case *intents.Conn:
			return w.Conn
		case *limitConn:
			return w.NetConn()
		case *framingConn:
			c = w.NetConn()
		default:
			return c
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// Errors of takeTunnel.
var (
	errTooManyTunnels       = errors.New("too many tunnels")
	errTooManyClientTunnels = errors.New("too many tunnels from this client")
)

// ownedByHost reports whether a client at remote ("addr:port") is a
// program on the proxy's own host (over loopback, or from one of its
// addresses, which the kernel takes from no other host): the owner. It
// holds the whole of a limit where a client holds a share of it: a
// browser, a package manager and a sync client together may open every
// tunnel.
func ownedByHost(remote string) bool { return isHostAddr(clientOf(remote)) }

// isHostAddr reports whether a is the proxy's own host's; a variable for
// tests whose loopback addresses stand for other hosts.
var isHostAddr = func(a netip.Addr) bool { return a.IsLoopback() || hostAddrs.has(a) }

// takeTunnel takes a place for a tunnel of client (its share, see
// shareOf), owner if it is the host's own (see ownedByHost); an error at
// MaxTunnels, at a client's share (not the owner's), or once the server
// closed. endTunnel gives it back.
func (s *Server) takeTunnel(client netip.Addr, owner bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrServerClosed
	case s.tunnels >= orDefault(s.MaxTunnels, DefaultMaxTunnels):
		return errTooManyTunnels
	case !owner && s.tunnelsOf[client] >= s.maxTunnelsPerClient():
		return errTooManyClientTunnels
	}
	s.tunnels++
	s.tunnelsOf[client]++
	s.wg.Add(1)
	return nil
}

func (s *Server) endTunnel(client netip.Addr) {
	s.mu.Lock()
	s.tunnels--
	if s.tunnelsOf[client]--; s.tunnelsOf[client] <= 0 {
		delete(s.tunnelsOf, client)
	}
	s.mu.Unlock()
	s.wg.Done()
}

// maxTunnelsPerClient is a client address's share of the tunnels.
func (s *Server) maxTunnelsPerClient() int {
	if s.MaxTunnelsPerClient > 0 {
		return s.MaxTunnelsPerClient
	}
	return max(1, orDefault(s.MaxTunnels, DefaultMaxTunnels)/4)
}

func (s *Server) tunnelIdleTimeout() time.Duration {
	if s.TunnelIdleTimeout < 0 {
		return 0
	}
	return orDefault(s.TunnelIdleTimeout, DefaultTunnelIdleTimeout)
}

func (s *Server) logTunnelIdle(ctx context.Context, client net.Conn, host string) {
	if s.Logger == nil {
		return
	}
	who := "an HTTP/2 stream"
	if client != nil {
		who = client.RemoteAddr().String()
	}
	s.Logger.Log(ctx, slog.LevelInfo, "proxy: tunnel closed: idle", "client", who, "host", host, "timeout", s.tunnelIdleTimeout())
}

// clientOf is the address of a client at remote ("addr:port"); the zero
// Addr if remote is not one.
func clientOf(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// shareOf is the key of the shares a client at remote ("addr:port")
// holds of the proxy's limits (its tunnels, its upstream pool, its turn
// for a place): its address, or for IPv6 its /64, which one host commonly
// holds whole and could else spend an address at a time.
func shareOf(remote string) netip.Addr {
	a := clientOf(remote)
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}
