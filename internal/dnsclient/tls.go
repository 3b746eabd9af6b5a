package dnsclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// ExchangeTLS sends m to server over TLS through r, on a connection kept
// from an earlier query if there is one (RFC 7858 section 3.4): again on a
// new connection if the kept one fails, since the server may have closed
// it while idle. The certificate must show name (empty: the server's
// address).
func (c *Client) ExchangeTLS(ctx context.Context, r Route, server netip.AddrPort, name string, m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	k := keptKey{r.Name, server.String() + "#" + name}
	for {
		conn := c.takeDoT(k)
		reused := conn != nil
		if conn == nil {
			var err error
			if conn, err = c.dialDoT(ctx, r, server, name); err != nil {
				return nil, err
			}
		}
		reply, err := exchangeOn(ctx, conn, m, "tcp")
		if err == nil {
			c.putDoT(k, conn)
			return reply, nil
		}
		conn.Close()
		if !reused || ctx.Err() != nil {
			return nil, err
		}
	}
}

// dialDoT connects to server through r and completes the TLS handshake.
func (c *Client) dialDoT(ctx context.Context, r Route, server netip.AddrPort, name string) (*tls.Conn, error) {
	raw, err := r.Dial(ctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{}
	if c.TLSConfig != nil {
		cfg = c.TLSConfig.Clone()
	}
	cfg.ServerName = name
	if cfg.ServerName == "" {
		cfg.ServerName = server.Addr().String()
	}
	cfg.NextProtos = []string{"dot"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		desc := server.String()
		if name != "" {
			desc += "#" + name
		}
		return nil, fmt.Errorf("DNS over TLS with %s: %w", desc, err)
	}
	return tc, nil
}

// takeDoT takes k's idle connection, if any.
func (c *Client) takeDoT(k keptKey) *tls.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn := c.dot[k]
	delete(c.dot, k)
	return conn
}

// putDoT keeps conn as k's idle connection, closing it if k has one
// already or the Client is closed.
func (c *Client) putDoT(k keptKey, conn *tls.Conn) {
	conn.SetDeadline(time.Time{})
	c.mu.Lock()
	if c.closed || c.dot[k] != nil {
		c.mu.Unlock()
		conn.Close()
		return
	}
	if c.dot == nil {
		c.dot = map[keptKey]*tls.Conn{}
	}
	c.dot[k] = conn
	c.mu.Unlock()
}
