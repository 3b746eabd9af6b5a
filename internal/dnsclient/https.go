package dnsclient

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
	"time"

	"github.com/miekg/dns"
)

// maxHTTPSReply is the largest DNS message there is (its TCP length
// prefix is 16 bits): a longer body is no answer.
const maxHTTPSReply = 65535

// contentType is RFC 8484's media type, for the query and the answer.
const contentType = "application/dns-message"

// ExchangeHTTPS POSTs m to url, connecting through r to server (no lookup
// is made for the URL's host), on connections kept between queries (one
// HTTP transport per route and server), and checks the answer: status
// 200, the DNS media type, at most the largest DNS message, a message
// that answers m. The certificate must show the URL's host.
func (c *Client) ExchangeHTTPS(ctx context.Context, r Route, url string, server netip.AddrPort, m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	q, err := m.Pack()
	if err != nil {
		return nil, err
	}
	tr := c.transport(r, url, server)
	if tr == nil {
		return nil, errors.New("resolver closed")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(q))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", contentType)
	resp, err := tr.RoundTrip(req) // no redirects: a resolver is where it was configured
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("DNS over HTTPS with %s: %s", url, resp.Status)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != contentType {
		return nil, fmt.Errorf("DNS over HTTPS with %s: the answer is %q, not %s", url, resp.Header.Get("Content-Type"), contentType)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPSReply+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxHTTPSReply {
		return nil, fmt.Errorf("DNS over HTTPS with %s: the answer is longer than any DNS message", url)
	}
	reply := new(dns.Msg)
	if err := reply.Unpack(body); err != nil {
		return nil, fmt.Errorf("DNS over HTTPS with %s: %w", url, err)
	}
	if !Answers(m, reply) {
		return nil, errNotAnAnswer
	}
	return reply, nil
}

// transport is the HTTP transport for url on r: its connections go
// through r to server. Nil once the Client is closed.
func (c *Client) transport(r Route, url string, server netip.AddrPort) *http.Transport {
	k := keptKey{r.Name, url + "#" + server.String()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if tr := c.doh[k]; tr != nil {
		return tr
	}
	cfg := &tls.Config{}
	if c.TLSConfig != nil {
		cfg = c.TLSConfig.Clone()
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return r.Dial(ctx, "tcp", server)
		},
		TLSClientConfig:        cfg,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 16 << 10,
		TLSHandshakeTimeout:    c.timeout(),
	}
	if c.doh == nil {
		c.doh = map[keptKey]*http.Transport{}
	}
	c.doh[k] = tr
	return tr
}
