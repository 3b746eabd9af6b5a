package intents

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

func TestParseTLSServer(t *testing.T) {
	for in, want := range map[string]EncryptedDNS{
		"1.1.1.1":                      {Addr: netip.MustParseAddrPort("1.1.1.1:853")},
		"1.1.1.1#cloudflare-dns.com":   {Addr: netip.MustParseAddrPort("1.1.1.1:853"), Name: "cloudflare-dns.com"},
		"[2606:4700::1111]:8853#x.org": {Addr: netip.MustParseAddrPort("[2606:4700::1111]:8853"), Name: "x.org"},
		"10.0.0.1:53":                  {Addr: netip.MustParseAddrPort("10.0.0.1:53")},
		"1.1.1.1#1.1.1.1":              {Addr: netip.MustParseAddrPort("1.1.1.1:853"), Name: "1.1.1.1"},
	} {
		got, err := parseTLSServer(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "dns.example", "1.1.1.1:x", "#name"} {
		_, err := parseTLSServer(bad)
		assert.Error(t, err, bad)
	}
}

// dotServer is a DNS-over-TLS server on loopback that answers one query
// per connection and then closes it, as a server does with connections
// idle past its timeout.
type dotServer struct {
	addr    netip.AddrPort
	accepts atomic.Int64
	queries atomic.Int64
}

func startDoT(t *testing.T, ca *testbed.CA) *dotServer {
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.Cert}})
	require.NoError(t, err)
	s := &dotServer{addr: netip.MustParseAddrPort(l.Addr().String())}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepts.Add(1)
			wg.Go(func() {
				defer c.Close()
				co := &dns.Conn{Conn: c}
				q, err := co.ReadMsg()
				if err != nil {
					return
				}
				s.queries.Add(1)
				_ = co.WriteMsg(reply(q, q.Question[0].Name+" 60 IN A 192.0.2.7"))
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return s
}

// A kept connection the server has closed is dialed again, within the
// query: the query does not fail for it, nor is it asked in plaintext.
func TestDNSOverTLSKeptConnectionClosed(t *testing.T) {
	ca, err := testbed.NewCA(netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	srv := startDoT(t, ca)
	plain := startFakeDNS(t, answering("www.test. 60 IN A 192.0.2.99"), nil)
	p := loPath(plain)
	p.DNSOverTLS = []EncryptedDNS{{Addr: srv.addr}} // the certificate must show 127.0.0.1
	r := testResolver(nil)
	r.Manager = &Manager{cfg: Config{DNSTLSConfig: &tls.Config{RootCAs: ca.Pool}}}
	defer r.wire.Close()
	for _, name := range []string{"a.test", "b.test"} {
		addrs, err := r.LookupPath(context.Background(), p, "ip4", name)
		require.NoError(t, err, name)
		assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.7")}, addrs, name)
	}
	assert.EqualValues(t, 2, srv.queries.Load())
	assert.EqualValues(t, 2, srv.accepts.Load(), "the kept connection was tried, found closed, and replaced")
	assert.Zero(t, plain.queries.Load(), "nothing in plaintext")
}

// A server whose certificate does not show the configured name is not
// used, and the path's plaintext server is not asked instead, unless the
// path may fall back to it.
func TestDNSOverTLSWrongCertificate(t *testing.T) {
	ca, err := testbed.NewCA(netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	srv := startDoT(t, ca)
	plain := startFakeDNS(t, answering("www.test. 60 IN A 192.0.2.99"), nil)
	p := loPath(plain)
	p.DNSOverTLS = []EncryptedDNS{{Addr: srv.addr, Name: "other.example"}}
	r := testResolver(nil)
	r.Manager = &Manager{cfg: Config{DNSTLSConfig: &tls.Config{RootCAs: ca.Pool}}}
	defer r.wire.Close()
	_, err = r.LookupPath(context.Background(), p, "ip4", "www.test")
	var de *net.DNSError
	require.ErrorAs(t, err, &de)
	assert.Contains(t, err.Error(), "certificate")
	assert.ErrorIs(t, err, errNoPlaintext)
	assert.Zero(t, srv.queries.Load(), "no query to a server that failed its check")
	assert.Zero(t, plain.queries.Load(), "nor in plaintext")

	p.DNSPlaintextFallback = true
	addrs, err := r.LookupPath(context.Background(), p, "ip4", "www.test")
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.99")}, addrs, "allowed to fall back: the plaintext answer")
	assert.Zero(t, srv.queries.Load())
}

// A DoT server that never answers ends the query at the Resolver's
// timeout, with no plaintext query.
func TestDNSOverTLSSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// Holds each connection open, never answering, until the client
	// closes it.
	testbed.Serve(t, l, func(c net.Conn) { io.Copy(io.Discard, c) })
	plain := startFakeDNS(t, answering("www.test. 60 IN A 192.0.2.99"), nil)
	p := loPath(plain)
	p.DNSOverTLS = []EncryptedDNS{{Addr: netip.MustParseAddrPort(l.Addr().String())}}
	r := testResolver(nil)
	defer r.wire.Close()
	start := time.Now()
	_, err = r.LookupPath(context.Background(), p, "ip4", "www.test")
	require.Error(t, err)
	assert.True(t, isTimeout(err), "%v", err)
	t.Logf("failed after %v (timeout %v)", time.Since(start).Round(time.Millisecond), r.Timeout)
	assert.Zero(t, plain.queries.Load())
}
