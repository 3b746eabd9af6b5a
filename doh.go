package intents

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// HTTPSServer is a path's DNS-over-HTTPS server (RFC 8484).
type HTTPSServer struct {
	URL  string         // where queries are POSTed
	Addr netip.AddrPort // where to connect: no lookup is made for the URL's host
}

func (s HTTPSServer) String() string { return s.URL + "#" + s.Addr.String() }

// parseHTTPSServer parses an https URL whose host is an address, or a
// name followed by "#ADDR" or "#ADDR:PORT" (the URL's port, else 443, by
// default).
func parseHTTPSServer(s string) (HTTPSServer, error) {
	raw, bootstrap, _ := strings.Cut(s, "#")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return HTTPSServer{}, fmt.Errorf("bad DNS-over-HTTPS server %q: want an https URL", s)
	}
	port := uint16(443)
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return HTTPSServer{}, fmt.Errorf("bad DNS-over-HTTPS server %q: port %q", s, p)
		}
		port = uint16(n)
	}
	if bootstrap == "" {
		bootstrap = u.Hostname()
	}
	ap, err := netip.ParseAddrPort(bootstrap)
	if err != nil {
		a, aerr := netip.ParseAddr(bootstrap)
		if aerr != nil {
			return HTTPSServer{}, fmt.Errorf("bad DNS-over-HTTPS server %q: a host name needs #ADDR, the address to reach it at", s)
		}
		ap = netip.AddrPortFrom(a.WithZone(""), port)
	}
	if ap.Port() == 0 {
		return HTTPSServer{}, fmt.Errorf("bad DNS-over-HTTPS server %q: port 0", s)
	}
	return HTTPSServer{URL: raw, Addr: ap}, nil
}

type dohKey struct {
	path string
	srv  HTTPSServer
}

// maxDoHReply is the largest DNS message there is (its TCP length prefix
// is 16 bits): a longer body is no answer.
const maxDoHReply = 65535

// dohContentType is RFC 8484's media type, for the query and the answer.
const dohContentType = "application/dns-message"

// exchangeHTTPS POSTs m to srv through path p, on connections kept
// between queries (one HTTP transport per path and server), and checks
// the answer: status 200, the DNS media type, at most maxDoHReply bytes,
// a message that answers m.
func (r *Resolver) exchangeHTTPS(ctx context.Context, p *Path, srv HTTPSServer, m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	q, err := m.Pack()
	if err != nil {
		return nil, err
	}
	tr := r.dohTransport(p, srv)
	if tr == nil {
		return nil, errors.New("resolver closed")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader(q))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", dohContentType)
	req.Header.Set("Accept", dohContentType)
	resp, err := tr.RoundTrip(req) // no redirects: a resolver is where it was configured
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("DNS over HTTPS with %s: %s", srv.URL, resp.Status)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != dohContentType {
		return nil, fmt.Errorf("DNS over HTTPS with %s: the answer is %q, not %s", srv.URL, resp.Header.Get("Content-Type"), dohContentType)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDoHReply+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxDoHReply {
		return nil, fmt.Errorf("DNS over HTTPS with %s: the answer is longer than any DNS message", srv.URL)
	}
	reply := new(dns.Msg)
	if err := reply.Unpack(body); err != nil {
		return nil, fmt.Errorf("DNS over HTTPS with %s: %w", srv.URL, err)
	}
	if !answers(m, reply) {
		return nil, errors.New("reply does not answer the query")
	}
	return reply, nil
}

// dohTransport is the HTTP transport for srv on p: its connections are
// bound to p and go to srv.Addr; its certificate is checked against the
// URL's host with the Manager's DNSTLSConfig. Nil once the Resolver is
// closed.
func (r *Resolver) dohTransport(p *Path, srv HTTPSServer) *http.Transport {
	k := dohKey{p.Name, srv}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if tr := r.doh[k]; tr != nil {
		return tr
	}
	cfg := &tls.Config{}
	if r.Manager != nil && r.Manager.cfg.DNSTLSConfig != nil {
		cfg = r.Manager.cfg.DNSTLSConfig.Clone()
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return r.dialPath(ctx, p, srv.Addr, "tcp")
		},
		TLSClientConfig:        cfg,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 16 << 10,
		TLSHandshakeTimeout:    r.Timeout,
	}
	if r.doh == nil {
		r.doh = map[dohKey]*http.Transport{}
	}
	r.doh[k] = tr
	return tr
}
