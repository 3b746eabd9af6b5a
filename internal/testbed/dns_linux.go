package testbed

import (
	"crypto/tls"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
)

// DNSServer answers on one path's server address (UDP and TCP port 53)
// from its own zone, so a test can tell which path a name was resolved on.
type DNSServer struct {
	Path    *Path // nil for StartDNSAt's
	Addr    netip.AddrPort
	queries atomic.Int64
	// Over TLS (StartDNSOverTLS) and HTTPS (StartDNSOverHTTPS): queries
	// and connections accepted.
	tlsQueries, tlsConns     atomic.Int64
	httpsQueries, httpsConns atomic.Int64

	silent atomic.Bool

	mu   sync.Mutex
	zone map[string][]netip.Addr // lower-case FQDN
	from map[netip.Addr]int64    // queries by source address
}

// SetSilent makes the server drop every query (over UDP, TCP, TLS and
// HTTPS: no answer at all, as a server that died) or answer again.
func (s *DNSServer) SetSilent(silent bool) { s.silent.Store(silent) }

// QueriesFrom returns how many queries came from each source address, in
// plaintext or over TLS (over HTTPS the source is the DoH connection's).
func (s *DNSServer) QueriesFrom() map[netip.Addr]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.from)
}

// Queries is how many queries the server has received, in plaintext and
// over TLS.
func (s *DNSServer) Queries() int64 { return s.queries.Load() }

// TLSQueries is how many of them came over TLS, and TLSConns on how many
// connections.
func (s *DNSServer) TLSQueries() int64 { return s.tlsQueries.Load() }
func (s *DNSServer) TLSConns() int64   { return s.tlsConns.Load() }

// HTTPSQueries is how many came over HTTPS, and HTTPSConns on how many
// connections.
func (s *DNSServer) HTTPSQueries() int64 { return s.httpsQueries.Load() }
func (s *DNSServer) HTTPSConns() int64   { return s.httpsConns.Load() }

// Set makes name resolve to addrs (A and AAAA records, TTL 60 s).
func (s *DNSServer) Set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.zone[strings.ToLower(dns.Fqdn(name))] = addrs
}

// ServeDNS answers from the zone; unknown names get NXDOMAIN.
func (s *DNSServer) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	s.queries.Add(1)
	if w.RemoteAddr() != nil {
		if src, err := netip.ParseAddrPort(w.RemoteAddr().String()); err == nil {
			s.mu.Lock()
			s.from[src.Addr().Unmap()]++
			s.mu.Unlock()
		}
	}
	if s.silent.Load() {
		return
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	question := q.Question[0]
	s.mu.Lock()
	addrs, ok := s.zone[strings.ToLower(question.Name)]
	s.mu.Unlock()
	if !ok {
		m.Rcode = dns.RcodeNameError
	}
	for _, a := range addrs {
		hdr := dns.RR_Header{Name: question.Name, Class: dns.ClassINET, Ttl: 60}
		switch {
		case a.Is4() && question.Qtype == dns.TypeA:
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case a.Is6() && question.Qtype == dns.TypeAAAA:
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	if len(m.Answer) == 0 && ok {
		m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
			Ns: "ns.test.", Mbox: "admin.test.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 30})
	}
	_ = w.WriteMsg(m)
}

// StartDNS starts a DNS server on every path's server address. Each zone
// starts with "whoami.test" resolving to that path's server address and
// "hostK.test" to server host K; on path i, "www.test" resolves to host
// ((i-1) mod hosts)+1, so names resolve differently per path.
func (tb *Testbed) StartDNS() ([]*DNSServer, error) {
	var servers []*DNSServer
	for i, p := range tb.Paths {
		s, err := tb.startDNS(p, p.ServerAddr, tb.Hosts[i%len(tb.Hosts)])
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// StartDNSAt starts a DNS server on addr, port 53, in the server
// namespace; on a server host's address it is reachable over every path,
// so that only the client decides which path its queries take. Its zone
// is as StartDNS's, "www.test" resolving to host 1 and "whoami.test" to
// addr.
func (tb *Testbed) StartDNSAt(addr netip.Addr) (*DNSServer, error) {
	return tb.startDNS(nil, addr, tb.Hosts[0])
}

func (tb *Testbed) startDNS(p *Path, addr, www netip.Addr) (*DNSServer, error) {
	s := &DNSServer{Path: p, Addr: netip.AddrPortFrom(addr, 53), zone: map[string][]netip.Addr{}, from: map[netip.Addr]int64{}}
	s.Set("whoami.test", addr)
	for k, h := range tb.Hosts {
		s.Set("host"+strconv.Itoa(k+1)+".test", h)
	}
	s.Set("www.test", www)
	var pc net.PacketConn
	var l net.Listener
	err := tb.Server.Do(func() error {
		var err error
		if pc, err = net.ListenPacket("udp", s.Addr.String()); err != nil {
			return err
		}
		l, err = net.Listen("tcp", s.Addr.String())
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		return nil, err
	}
	tb.serveDNS(&dns.Server{PacketConn: pc, Handler: s})
	tb.serveDNS(&dns.Server{Listener: l, Handler: s})
	return s, nil
}

// StartDNSOverTLS serves the servers' zones over TLS too (RFC 7858: TCP
// port 853 of each server's address) with ca's certificate, counting the
// queries and connections.
func (tb *Testbed) StartDNSOverTLS(servers []*DNSServer, ca *CA) error {
	for _, s := range servers {
		l, err := tb.listenTCP(netip.AddrPortFrom(s.Addr.Addr(), 853))
		if err != nil {
			return err
		}
		tl := tls.NewListener(countingListener{l, &s.tlsConns}, &tls.Config{Certificates: []tls.Certificate{ca.Cert}})
		tb.serveDNS(&dns.Server{Listener: tl, Net: "tcp-tls", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
			s.tlsQueries.Add(1)
			s.ServeDNS(w, q)
		})})
	}
	return nil
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// StartDNSOverHTTPS serves the servers' zones over HTTPS too (RFC 8484:
// POST https://ADDR/dns-query, TCP port 443 of each server's address)
// with ca's certificate, counting the queries and connections.
func (tb *Testbed) StartDNSOverHTTPS(servers []*DNSServer, ca *CA) error {
	for _, s := range servers {
		l, err := tb.listenTCP(netip.AddrPortFrom(s.Addr.Addr(), 443))
		if err != nil {
			return err
		}
		tb.serveHTTP(&http.Server{
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.Cert}},
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(io.LimitReader(r.Body, 65536))
				q := new(dns.Msg)
				if err != nil || r.Method != http.MethodPost || r.URL.Path != "/dns-query" || q.Unpack(body) != nil {
					http.Error(w, "bad query", http.StatusBadRequest)
					return
				}
				s.httpsQueries.Add(1)
				if s.silent.Load() { // no answer, as a server that died
					<-r.Context().Done()
					return
				}
				rec := &dnsRecorder{}
				s.ServeDNS(rec, q)
				b, err := rec.m.Pack()
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "application/dns-message")
				w.Write(b)
			}),
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					s.httpsConns.Add(1)
				}
			},
		}, l, true)
	}
	return nil
}

// dnsRecorder keeps the message a dns.Handler writes.
type dnsRecorder struct{ m *dns.Msg }

func (r *dnsRecorder) WriteMsg(m *dns.Msg) error { r.m = m; return nil }
func (r *dnsRecorder) Write([]byte) (int, error) {
	return 0, errors.New("dnsRecorder: raw writes are not kept")
}
func (r *dnsRecorder) LocalAddr() net.Addr  { return nil }
func (r *dnsRecorder) RemoteAddr() net.Addr { return nil }
func (r *dnsRecorder) Close() error         { return nil }
func (r *dnsRecorder) TsigStatus() error    { return nil }
func (r *dnsRecorder) TsigTimersOnly(bool)  {}
func (r *dnsRecorder) Hijack()              {}
