package intents

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHTTPSServer(t *testing.T) {
	for in, want := range map[string]EncryptedDNS{
		"https://1.1.1.1/dns-query":                    {URL: "https://1.1.1.1/dns-query", Addr: netip.MustParseAddrPort("1.1.1.1:443")},
		"https://[2606:4700::1111]:8443/q":             {URL: "https://[2606:4700::1111]:8443/q", Addr: netip.MustParseAddrPort("[2606:4700::1111]:8443")},
		"https://dns.example/dns-query#192.0.2.1":      {URL: "https://dns.example/dns-query", Addr: netip.MustParseAddrPort("192.0.2.1:443")},
		"https://dns.example:444/q#192.0.2.1":          {URL: "https://dns.example:444/q", Addr: netip.MustParseAddrPort("192.0.2.1:444")},
		"https://dns.example/dns-query#192.0.2.1:8443": {URL: "https://dns.example/dns-query", Addr: netip.MustParseAddrPort("192.0.2.1:8443")},
	} {
		got, err := parseHTTPSServer(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "http://1.1.1.1/dns-query", "https://dns.example/dns-query", "https:///q#1.1.1.1",
		"https://u:p@1.1.1.1/q", "https://1.1.1.1:0/q", "1.1.1.1"} {
		_, err := parseHTTPSServer(bad)
		assert.Error(t, err, bad)
	}
}

// dohServer is a DNS-over-HTTPS server on loopback whose answers a test
// shapes; it counts queries and connections.
type dohServer struct {
	srv            *httptest.Server
	queries, conns atomic.Int64
	answer         func(w http.ResponseWriter, q *dns.Msg)
}

func startDoH(t *testing.T, answer func(w http.ResponseWriter, q *dns.Msg)) (*dohServer, *x509.CertPool) {
	d := &dohServer{answer: answer}
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 65536))
		q := new(dns.Msg)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/dns-message" || q.Unpack(body) != nil {
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		d.queries.Add(1)
		d.answer(w, q)
	}))
	d.srv.EnableHTTP2 = true
	d.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			d.conns.Add(1)
		}
	}
	d.srv.StartTLS()
	t.Cleanup(d.srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(d.srv.Certificate())
	return d, roots
}

func writeDNS(w http.ResponseWriter, m *dns.Msg) {
	w.Header().Set("Content-Type", "application/dns-message")
	w.Write(pack(m))
}

// dohPath is a loopback path with the DoH server (its URL by the name its
// test certificate shows, with the address to reach it at) and a
// plaintext server beside it.
func dohPath(t *testing.T, d *dohServer, roots *x509.CertPool) (*Path, *Resolver, *fakeDNS) {
	plain := startFakeDNS(t, answering("www.test. 60 IN A 192.0.2.99"), nil)
	p := loPath(plain)
	_, port, _ := net.SplitHostPort(d.srv.Listener.Addr().String())
	srv, err := parseHTTPSServer("https://example.com:" + port + "/dns-query#127.0.0.1")
	require.NoError(t, err)
	p.DNSOverHTTPS = []EncryptedDNS{srv}
	r := testResolver(nil)
	r.Manager = &Manager{cfg: Config{DNSTLSConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(r.wire.Close)
	return p, r, plain
}

// Queries go over HTTPS, on one kept connection, and none in plaintext.
func TestDNSOverHTTPS(t *testing.T) {
	d, roots := startDoH(t, func(w http.ResponseWriter, q *dns.Msg) {
		writeDNS(w, reply(q, q.Question[0].Name+" 60 IN A 192.0.2.8"))
	})
	p, r, plain := dohPath(t, d, roots)
	for _, name := range []string{"a.test", "b.test", "c.test"} {
		addrs, err := r.LookupPath(context.Background(), p, "ip4", name)
		require.NoError(t, err, name)
		assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.8")}, addrs)
	}
	assert.EqualValues(t, 3, d.queries.Load())
	assert.EqualValues(t, 1, d.conns.Load(), "one connection for all three")
	assert.Zero(t, plain.queries.Load())
}

// Answers a DoH server must not be believed in: each an error, none
// used, and nothing asked in plaintext.
func TestDNSOverHTTPSHostileAnswers(t *testing.T) {
	good := func(q *dns.Msg) *dns.Msg { return reply(q, q.Question[0].Name+" 60 IN A 192.0.2.8") }
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, q *dns.Msg)
		want   string
	}{
		{"wrong content type", func(w http.ResponseWriter, q *dns.Msg) {
			w.Header().Set("Content-Type", "text/html")
			w.Write(pack(good(q)))
		}, "not application/dns-message"},
		{"oversized", func(w http.ResponseWriter, q *dns.Msg) {
			w.Header().Set("Content-Type", "application/dns-message")
			w.Write(pack(good(q)))
			w.Write(make([]byte, 70000))
		}, "longer than any DNS message"},
		{"wrong ID", func(w http.ResponseWriter, q *dns.Msg) {
			m := good(q)
			m.Id++
			writeDNS(w, m)
		}, "does not answer the query"},
		{"another question", func(w http.ResponseWriter, q *dns.Msg) {
			q2 := q.Copy()
			q2.Question[0].Name = "evil.test."
			writeDNS(w, reply(q2, "evil.test. 60 IN A 192.0.2.66"))
		}, "does not answer the query"},
		{"status 500", func(w http.ResponseWriter, q *dns.Msg) {
			w.Header().Set("Content-Type", "application/dns-message")
			w.WriteHeader(http.StatusInternalServerError)
			w.Write(pack(good(q)))
		}, "500"},
		{"garbage", func(w http.ResponseWriter, q *dns.Msg) {
			w.Header().Set("Content-Type", "application/dns-message")
			w.Write([]byte("not a DNS message"))
		}, "DNS over HTTPS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, roots := startDoH(t, tc.answer)
			p, r, plain := dohPath(t, d, roots)
			_, err := r.LookupPath(context.Background(), p, "ip4", "www.test")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.ErrorIs(t, err, errNoPlaintext)
			assert.Zero(t, plain.queries.Load(), "nothing in plaintext")
		})
	}
}

// A DoH server whose certificate is not trusted gets no query.
func TestDNSOverHTTPSUntrusted(t *testing.T) {
	d, _ := startDoH(t, func(w http.ResponseWriter, q *dns.Msg) {
		writeDNS(w, reply(q, q.Question[0].Name+" 60 IN A 192.0.2.8"))
	})
	p, r, plain := dohPath(t, d, x509.NewCertPool())
	_, err := r.LookupPath(context.Background(), p, "ip4", "www.test")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "certificate"), "%v", err)
	assert.Zero(t, d.queries.Load())
	assert.Zero(t, plain.queries.Load())
}
