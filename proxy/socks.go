package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/sockintents/intents"
)

// SOCKS5 (RFC 1928), the CONNECT command, with no authentication or, if
// the server has a User, username and password (RFC 1929). No maintained
// SOCKS5 server library is available to this module; the subset is
// small.
const (
	socksVersion     = 5
	socksNoAuth      = 0x00
	socksUserPass    = 0x02
	socksNoMethod    = 0xff
	socksConnect     = 0x01
	socksIPv4        = 0x01
	socksDomain      = 0x03
	socksIPv6        = 0x04
	socksSucceeded   = 0x00
	socksFailure     = 0x01
	socksNotAllowed  = 0x02
	socksNetUnreach  = 0x03
	socksHostUnreach = 0x04
	socksRefused     = 0x05
	socksTTLExpired  = 0x06
	socksBadCommand  = 0x07
	socksBadAddrType = 0x08
)

// ServeSOCKS serves SOCKS5 clients accepted on l, with intents in for
// every tunnel opened through it. It returns when l fails or Close is
// called (ErrServerClosed).
func (s *Server) ServeSOCKS(l net.Listener, in intents.Intents) error {
	return s.serveConns(l, pacSOCKS, func(c net.Conn) { s.serveSOCKS(c, in) })
}

// serveConns serves each connection accepted on l, a listener of kind
// (its PAC keyword, "" for none), with serve in a goroutine of its own,
// under the listener's client limits, until l fails or Close is called.
func (s *Server) serveConns(l net.Listener, kind string, serve func(net.Conn)) error {
	s.init()
	if !s.addListener(l, nil, kind) {
		return ErrServerClosed
	}
	l = s.newLimitListener(l, orDefault(s.MaxClients, DefaultMaxClients), s.allowed)
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors, say: the limit listener waits before it
			// accepts again.
			if s.Logger != nil {
				s.Logger.Info("proxy: accept failed", "addr", l.Addr().String(), "err", err)
			}
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		s.conns[c] = true
		s.wg.Add(1) // with the check, so that Close waits for it
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.untrack(c)
				c.Close()
			}()
			serve(c)
		}()
	}
}

// socksRequest is a client's CONNECT request.
type socksRequest struct {
	host string
	port uint16
}

// serveSOCKS serves one SOCKS5 client.
func (s *Server) serveSOCKS(c net.Conn, in intents.Intents) {
	ctx := context.Background()
	c.SetDeadline(time.Now().Add(orDefault(s.ReadHeaderTimeout, DefaultReadHeaderTimeout)))
	br := bufio.NewReaderSize(c, 512)
	req, code, err := s.socksHandshake(c, br)
	if err != nil {
		if code != 0 {
			socksReply(c, code, nil)
		}
		s.socksLog(ctx, c, req, err)
		return
	}
	if _, err := s.checkDestination(req.host, req.port); err != nil {
		socksReply(c, socksNotAllowed, nil)
		s.socksLog(ctx, c, req, err)
		return
	}
	client := shareOf(c.RemoteAddr().String())
	if err := s.takeTunnel(client, ownedByHost(c.RemoteAddr().String())); err != nil {
		socksReply(c, socksFailure, nil)
		s.socksLog(ctx, c, req, err)
		return
	}
	defer s.endTunnel(client)
	up, err := s.dialTunnel(ctx, req.host, req.port, s.destIntents(in, req.host))
	if err != nil {
		socksReply(c, socksDialCode(err), nil)
		s.socksLog(ctx, c, req, err)
		return
	}
	if err := socksReply(c, socksSucceeded, up.LocalAddr()); err != nil {
		up.Close()
		return
	}
	c.SetDeadline(time.Time{})
	releasePlace(c) // MaxTunnels counts it now
	s.relay(ctx, c, br, up, req.host)
}

// socksHandshake reads the greeting, authenticates and reads the
// request; on an error, code is the reply the client is owed (0: none).
func (s *Server) socksHandshake(c net.Conn, br *bufio.Reader) (socksRequest, byte, error) {
	var req socksRequest
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return req, 0, err
	}
	if head[0] != socksVersion {
		return req, 0, fmt.Errorf("not SOCKS5 (version %d)", head[0])
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return req, 0, err
	}
	// A client that is not allowed is told so after its request, without
	// authenticating: it gets no chance to try passwords.
	allowed := s.allowed(c.RemoteAddr().String())
	want := byte(socksNoAuth)
	if s.User != "" && allowed {
		want = socksUserPass
	}
	if !slices.Contains(methods, want) {
		c.Write([]byte{socksVersion, socksNoMethod})
		return req, 0, errors.New("no acceptable authentication method")
	}
	if _, err := c.Write([]byte{socksVersion, want}); err != nil {
		return req, 0, err
	}
	if want == socksUserPass {
		if err := s.socksAuth(c, br); err != nil {
			return req, 0, err
		}
	}
	var h [4]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return req, 0, err
	}
	if h[0] != socksVersion {
		return req, socksFailure, fmt.Errorf("bad request version %d", h[0])
	}
	switch h[3] {
	case socksIPv4, socksIPv6:
		b := make([]byte, 4)
		if h[3] == socksIPv6 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return req, 0, err
		}
		a, _ := netip.AddrFromSlice(b)
		req.host = a.Unmap().String()
	case socksDomain:
		n, err := br.ReadByte()
		if err != nil {
			return req, 0, err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return req, 0, err
		}
		req.host = string(b)
		if n == 0 || checkHostPattern(req.host) != nil || req.host == "*" {
			return req, socksHostUnreach, fmt.Errorf("bad host name %q", req.host)
		}
	default:
		return req, socksBadAddrType, fmt.Errorf("address type %d not supported", h[3])
	}
	var p [2]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return req, 0, err
	}
	req.port = binary.BigEndian.Uint16(p[:])
	if h[1] != socksConnect {
		return req, socksBadCommand, fmt.Errorf("command %d not supported (CONNECT only)", h[1])
	}
	if !allowed {
		return req, socksNotAllowed, errors.New("client not allowed")
	}
	return req, 0, nil
}

// socksAuth checks a username and password (RFC 1929), in constant time.
func (s *Server) socksAuth(c net.Conn, br *bufio.Reader) error {
	ver, err := br.ReadByte()
	if err != nil {
		return err
	}
	if ver != 1 {
		return fmt.Errorf("bad authentication version %d", ver)
	}
	field := func() (string, error) {
		n, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		b := make([]byte, n)
		_, err = io.ReadFull(br, b)
		return string(b), err
	}
	user, err := field()
	if err != nil {
		return err
	}
	pass, err := field()
	if err != nil {
		return err
	}
	if !s.credentialsMatch(user, pass) {
		c.Write([]byte{1, 1})
		return errors.New("proxy authentication failed")
	}
	_, err = c.Write([]byte{1, 0})
	return err
}

// socksReply writes a reply with code and the bound address, if any.
func socksReply(c net.Conn, code byte, bound net.Addr) error {
	b := []byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0}
	if ap, err := netip.ParseAddrPort(addrString(bound)); err == nil {
		a := ap.Addr().Unmap()
		if a.Is4() {
			b = append(b[:4], a.AsSlice()...)
		} else {
			b = append(append(b[:3], socksIPv6), a.AsSlice()...)
		}
		b = binary.BigEndian.AppendUint16(b, ap.Port())
	}
	_, err := c.Write(b)
	return err
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// socksDialCode is the reply for a tunnel that could not be opened.
func socksDialCode(err error) byte {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, errLoop), errors.Is(err, ErrLocalDestination):
		return socksNotAllowed
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksRefused
	case isTimeout(err):
		return socksTTLExpired
	case errors.As(err, &dnsErr), errors.Is(err, syscall.EHOSTUNREACH):
		return socksHostUnreach
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, intents.ErrNoPath):
		return socksNetUnreach
	}
	return socksFailure
}

func (s *Server) socksLog(ctx context.Context, c net.Conn, req socksRequest, err error) {
	if s.Logger == nil || errors.Is(err, io.EOF) {
		return
	}
	s.Logger.Log(ctx, slog.LevelInfo, "proxy: SOCKS5 refused", "client", c.RemoteAddr().String(),
		"target", net.JoinHostPort(req.host, strconv.Itoa(int(req.port))), "err", err)
}
