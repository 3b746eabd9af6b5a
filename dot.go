package intents

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// TLSServer is a path's DNS-over-TLS server (RFC 7858).
type TLSServer struct {
	Addr netip.AddrPort
	// Name is the name the server's certificate must show (empty: its
	// address must).
	Name string
}

func (s TLSServer) String() string {
	if s.Name == "" {
		return s.Addr.String()
	}
	return s.Addr.String() + "#" + s.Name
}

// parseTLSServer parses "ADDR" or "ADDR:PORT" (port 853 by default),
// either followed by "#NAME".
func parseTLSServer(s string) (TLSServer, error) {
	addr, name, _ := strings.Cut(s, "#")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		a, aerr := netip.ParseAddr(addr)
		if aerr != nil {
			return TLSServer{}, fmt.Errorf("bad DNS-over-TLS server %q: want ADDR, ADDR:PORT, either with #NAME", s)
		}
		ap = netip.AddrPortFrom(a.WithZone(""), 853)
	}
	if ap.Port() == 0 {
		return TLSServer{}, fmt.Errorf("bad DNS-over-TLS server %q: port 0", s)
	}
	if _, err := netip.ParseAddr(name); name != "" && err != nil && !isDomainName(name) {
		return TLSServer{}, fmt.Errorf("bad DNS-over-TLS server %q: %q is no name a certificate can show", s, name)
	}
	return TLSServer{Addr: ap, Name: name}, nil
}

// dotKey names a DNS-over-TLS connection: its path and server.
type dotKey struct {
	path string
	srv  TLSServer
}

// exchangeTLS sends m to srv over TLS through path p, on a connection
// kept from an earlier query if there is one (RFC 7858 section 3.4):
// again on a new connection if the kept one fails, since the server may
// have closed it while idle. The certificate is checked against srv's
// name (or address) with the Manager's DNSTLSConfig.
func (r *Resolver) exchangeTLS(ctx context.Context, p *Path, srv TLSServer, m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	k := dotKey{p.Name, srv}
	for {
		conn := r.takeDoT(k)
		reused := conn != nil
		if conn == nil {
			var err error
			if conn, err = r.dialDoT(ctx, p, srv); err != nil {
				return nil, err
			}
		}
		reply, err := exchangeOn(ctx, conn, m, "tcp")
		if err == nil {
			r.putDoT(k, conn)
			return reply, nil
		}
		conn.Close()
		if !reused || ctx.Err() != nil {
			return nil, err
		}
	}
}

// dialDoT connects to srv through p and completes the TLS handshake.
func (r *Resolver) dialDoT(ctx context.Context, p *Path, srv TLSServer) (*tls.Conn, error) {
	raw, err := r.dialPath(ctx, p, srv.Addr, "tcp")
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{}
	if r.Manager != nil && r.Manager.cfg.DNSTLSConfig != nil {
		cfg = r.Manager.cfg.DNSTLSConfig.Clone()
	}
	cfg.ServerName = srv.Name
	if cfg.ServerName == "" {
		cfg.ServerName = srv.Addr.Addr().String()
	}
	cfg.NextProtos = []string{"dot"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("DNS over TLS with %s: %w", srv, err)
	}
	return tc, nil
}

// takeDoT takes k's idle connection, if any.
func (r *Resolver) takeDoT(k dotKey) *tls.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.dot[k]
	delete(r.dot, k)
	return c
}

// putDoT keeps c as k's idle connection, closing it if k has one already
// or the Resolver is closed.
func (r *Resolver) putDoT(k dotKey, c *tls.Conn) {
	c.SetDeadline(time.Time{})
	r.mu.Lock()
	if r.closed || r.dot[k] != nil {
		r.mu.Unlock()
		c.Close()
		return
	}
	if r.dot == nil {
		r.dot = map[dotKey]*tls.Conn{}
	}
	r.dot[k] = c
	r.mu.Unlock()
}

// closeEncrypted closes the idle DNS-over-TLS and DNS-over-HTTPS
// connections; those in use are closed when their query is done.
func (r *Resolver) closeEncrypted() {
	r.mu.Lock()
	conns, transports := r.dot, r.doh
	r.dot, r.doh, r.closed = nil, nil, true
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
}

// errNoPlaintext says why a path with encrypted DNS servers was not asked
// in plaintext.
var errNoPlaintext = errors.New("its encrypted DNS servers failed, and PathConfig.DNSPlaintextFallback is not set")

// exchangeOn sends m on conn and reads the reply, within ctx: its end
// ends a blocked read or write at once.
func exchangeOn(ctx context.Context, conn net.Conn, m *dns.Msg, network string) (*dns.Msg, error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	reply, err := exchangeConn(conn, m, network)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return reply, err
}
