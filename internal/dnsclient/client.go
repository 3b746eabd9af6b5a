// Package dnsclient exchanges DNS messages with one server at a time, over
// UDP (and TCP when a reply is truncated), TLS (RFC 7858) and HTTPS
// (RFC 8484), through connections its caller dials: it knows how to speak
// to a server, not which network to reach it over. The root package's
// Resolver gives it a dial bound to a path and keeps the cache, the
// servers' order and the policy of which to ask.
package dnsclient

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// EDNSSize is the UDP payload size queries advertise, the DNS flag day
// 2020 size (no IP fragmentation); a larger datagram is no answer.
const EDNSSize = 1232

// Route is how to reach servers: a dial (over "udp" or "tcp") and the name
// of what it dials through (a path's), under which the connections kept
// between queries are filed.
type Route struct {
	Name string
	Dial func(ctx context.Context, network string, server netip.AddrPort) (net.Conn, error)
}

// A Client exchanges messages with servers. It keeps a DNS-over-TLS
// connection per route and server, and an HTTP transport per route and
// DNS-over-HTTPS server, between queries, until Close. The zero Client is
// ready to use; it is safe for concurrent use.
type Client struct {
	// Timeout bounds one exchange (default 2 s).
	Timeout time.Duration
	// TLSConfig is the base of the TLS configuration of encrypted
	// exchanges (nil: the defaults); the server name is set per server.
	TLSConfig *tls.Config

	mu     sync.Mutex
	dot    map[keptKey]*tls.Conn       // idle DNS-over-TLS connections
	doh    map[keptKey]*http.Transport // DNS-over-HTTPS transports
	closed bool                        // no more are kept
}

// keptKey names what is kept for a server reached over a route.
type keptKey struct {
	route, server string
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 2 * time.Second
}

// Exchange sends m to server over UDP through r, and again over TCP when
// the reply is truncated.
func (c *Client) Exchange(ctx context.Context, r Route, server netip.AddrPort, m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	reply, err := exchangeNet(ctx, r, server, m, "udp")
	if err == nil && reply.Truncated {
		reply, err = exchangeNet(ctx, r, server, m, "tcp")
	}
	return reply, err
}

func exchangeNet(ctx context.Context, r Route, server netip.AddrPort, m *dns.Msg, network string) (*dns.Msg, error) {
	conn, err := r.Dial(ctx, network, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return exchangeOn(ctx, conn, m, network)
}

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

// exchangeConn sends m on conn and returns the reply. Over UDP, where
// anyone who guesses the port can send a datagram, a datagram that does
// not parse or does not answer m is ignored and the wait goes on until the
// deadline, as Go's own resolver does (net/dnsclient_unix.go,
// dnsPacketRoundTrip): a forged or stray datagram must not cost the
// genuine reply.
func exchangeConn(conn net.Conn, m *dns.Msg, network string) (*dns.Msg, error) {
	co := &dns.Conn{Conn: conn}
	if err := co.WriteMsg(m); err != nil {
		return nil, err
	}
	if network != "udp" {
		reply, err := co.ReadMsg()
		if err == nil && !Answers(m, reply) {
			err = errNotAnAnswer
		}
		return reply, err
	}
	buf := make([]byte, EDNSSize+1)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		reply := new(dns.Msg)
		if n > EDNSSize || reply.Unpack(buf[:n]) != nil || !Answers(m, reply) {
			continue
		}
		return reply, nil
	}
}

var errNotAnAnswer = errors.New("reply does not answer the query")

// Answers reports whether reply is a response to q: its ID and its
// question.
func Answers(q, reply *dns.Msg) bool {
	return reply.Response && reply.Id == q.Id && len(reply.Question) == 1 &&
		strings.EqualFold(reply.Question[0].Name, q.Question[0].Name) &&
		reply.Question[0].Qtype == q.Question[0].Qtype && reply.Question[0].Qclass == q.Question[0].Qclass
}

// CheckReply rejects replies that do not answer q: not a response, another
// question, or a server failure (which the next server may not have).
func CheckReply(q, reply *dns.Msg) error {
	if !Answers(q, reply) {
		return errNotAnAnswer
	}
	switch reply.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
		return nil
	}
	return errors.New("server answered " + dns.RcodeToString[reply.Rcode])
}

// Close closes the idle DNS-over-TLS and DNS-over-HTTPS connections and
// keeps none from then on; those in use are closed when their query is
// done.
func (c *Client) Close() {
	c.mu.Lock()
	conns, transports := c.dot, c.doh
	c.dot, c.doh, c.closed = nil, nil, true
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
}

// Forget closes what is kept for the routes named, whose dials no longer
// reach where they did (a path gone or changed).
func (c *Client) Forget(routes func(name string) bool) {
	var conns []*tls.Conn
	var transports []*http.Transport
	c.mu.Lock()
	for k, conn := range c.dot {
		if routes(k.route) {
			conns = append(conns, conn)
			delete(c.dot, k)
		}
	}
	for k, tr := range c.doh {
		if routes(k.route) {
			transports = append(transports, tr)
			delete(c.doh, k)
		}
	}
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
}
