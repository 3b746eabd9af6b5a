package intents

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDNS is a DNS server on loopback whose UDP replies are raw bytes, so
// tests can send malformed, mismatched or truncated answers.
type fakeDNS struct {
	addr    netip.AddrPort
	queries atomic.Int64
	mu      sync.Mutex
	seen    []string // "NAME TYPE" per UDP query
}

func (f *fakeDNS) questions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// startFakeDNS serves udp (nil reply: drop the query) and, if tcp is not
// nil, TCP on the same port.
func startFakeDNS(t *testing.T, udp func(q *dns.Msg) []byte, tcp func(q *dns.Msg) *dns.Msg) *fakeDNS {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pc, err := net.ListenPacket("udp", l.Addr().String())
	require.NoError(t, err)
	f := &fakeDNS{addr: netip.MustParseAddrPort(pc.LocalAddr().String())}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
				continue
			}
			f.queries.Add(1)
			f.mu.Lock()
			f.seen = append(f.seen, q.Question[0].Name+" "+dns.TypeToString[q.Question[0].Qtype])
			f.mu.Unlock()
			if reply := udp(q); reply != nil {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	}()
	srv := &dns.Server{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		if tcp != nil {
			_ = w.WriteMsg(tcp(q))
		}
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() {
		pc.Close()
		<-done
		_ = srv.Shutdown()
		<-served
	})
	return f
}

func reply(q *dns.Msg, rrs ...string) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		if rr.Header().Rrtype == dns.TypeSOA {
			m.Ns = append(m.Ns, rr)
		} else if rr.Header().Rrtype == q.Question[0].Qtype || rr.Header().Rrtype == dns.TypeCNAME {
			m.Answer = append(m.Answer, rr)
		}
	}
	return m
}

func pack(m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		panic(err)
	}
	return b
}

// answering replies with rrs (those of the question's type).
func answering(rrs ...string) func(q *dns.Msg) []byte {
	return func(q *dns.Msg) []byte { return pack(reply(q, rrs...)) }
}

func loPath(servers ...*fakeDNS) *Path {
	p := &Path{Name: "lo", Index: 1, Type: TypeLoopback, Up: true,
		Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	for _, s := range servers {
		p.DNS = append(p.DNS, s.addr)
	}
	return p
}

func testResolver(clock *time.Time) *Resolver {
	r := &Resolver{Timeout: 300 * time.Millisecond, Attempts: 1, Ndots: 1}
	if clock != nil {
		r.now = func() time.Time { return *clock }
	}
	return r
}

func TestLookupPathAnswersAndCaches(t *testing.T) {
	srv := startFakeDNS(t, answering("www.test. 60 IN A 192.0.2.1", "www.test. 60 IN A 192.0.2.2",
		"www.test. 30 IN AAAA 2001:db8::1"), nil)
	clock := time.Now()
	r := testResolver(&clock)
	p := loPath(srv)

	addrs, err := r.LookupPath(context.Background(), p, "tcp", "www.test")
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}, addrs)
	assert.Equal(t, []string{"www.test. A"}, srv.questions(), "an IPv4-only path asks for A only")

	_, err = r.LookupPath(context.Background(), p, "tcp", "www.test")
	require.NoError(t, err)
	assert.EqualValues(t, 1, srv.queries.Load(), "answered from the cache within the TTL")

	clock = clock.Add(61 * time.Second)
	_, err = r.LookupPath(context.Background(), p, "tcp", "www.test")
	require.NoError(t, err)
	assert.EqualValues(t, 2, srv.queries.Load(), "asked again after the TTL")

	p6 := loPath(srv)
	p6.Name = "lo6"
	p6.Addrs = append(p6.Addrs, netip.MustParseAddr("::1"))
	addrs, err = r.LookupPath(context.Background(), p6, "tcp", "www.test")
	require.NoError(t, err)
	assert.Equal(t, []string{"2001:db8::1", "192.0.2.1", "192.0.2.2"}, addrStrings(addrs), "IPv6 first, interleaved")
	_, err = r.LookupPath(context.Background(), p6, "tcp4", "www.test")
	require.NoError(t, err)
}

// Each path has a cache of its own: a name answered on one path is asked
// again on another, of that path's own server, whose answer (another
// view, as a split-horizon or a CDN's per-network DNS gives) is the one
// returned there.
func TestLookupPathCachesPerPath(t *testing.T) {
	srvA := startFakeDNS(t, answering("www.test. 60 IN A 192.0.2.1"), nil)
	srvB := startFakeDNS(t, answering("www.test. 60 IN A 198.51.100.1"), nil)
	r := testResolver(nil)
	a, b := loPath(srvA), loPath(srvB)
	b.Name, b.Index = "lo-b", 2

	for range 2 {
		addrs, err := r.LookupPath(context.Background(), a, "tcp4", "www.test")
		require.NoError(t, err)
		assert.Equal(t, []string{"192.0.2.1"}, addrStrings(addrs), "path a's view")
		addrs, err = r.LookupPath(context.Background(), b, "tcp4", "www.test")
		require.NoError(t, err)
		assert.Equal(t, []string{"198.51.100.1"}, addrStrings(addrs), "path b's view, not a's cached one")
	}
	assert.EqualValues(t, 1, srvA.queries.Load(), "path a's server asked once, then its cache")
	assert.EqualValues(t, 1, srvB.queries.Load(), "path b's server asked once, then its cache")
}

func addrStrings(addrs []netip.Addr) []string {
	var s []string
	for _, a := range addrs {
		s = append(s, a.String())
	}
	return s
}

func TestLookupPathFollowsCNAME(t *testing.T) {
	srv := startFakeDNS(t, answering("www.test. 300 IN CNAME edge.cdn.test.", "edge.cdn.test. 20 IN A 192.0.2.7",
		"other.test. 300 IN A 192.0.2.66"), nil)
	clock := time.Now()
	r := testResolver(&clock)
	addrs, err := r.LookupPath(context.Background(), loPath(srv), "tcp", "www.test")
	require.NoError(t, err)
	assert.Equal(t, []string{"192.0.2.7"}, addrStrings(addrs), "records off the chain are ignored")
	clock = clock.Add(21 * time.Second)
	_, _ = r.LookupPath(context.Background(), loPath(srv), "tcp", "www.test")
	assert.EqualValues(t, 2, srv.queries.Load(), "the smallest TTL on the chain counts")
}

func TestLookupPathNegativeCaching(t *testing.T) {
	srv := startFakeDNS(t, func(q *dns.Msg) []byte {
		m := reply(q, "test. 3600 IN SOA ns.test. admin.test. 1 7200 900 1209600 10")
		m.Rcode = dns.RcodeNameError
		return pack(m)
	}, nil)
	clock := time.Now()
	r := testResolver(&clock)
	_, err := r.LookupPath(context.Background(), loPath(srv), "tcp", "nope.test")
	var de *net.DNSError
	require.ErrorAs(t, err, &de)
	assert.True(t, de.IsNotFound)
	_, err = r.LookupPath(context.Background(), loPath(srv), "tcp", "nope.test")
	require.Error(t, err)
	assert.EqualValues(t, 1, srv.queries.Load(), "NXDOMAIN cached for the SOA minimum")
	clock = clock.Add(11 * time.Second)
	_, _ = r.LookupPath(context.Background(), loPath(srv), "tcp", "nope.test")
	assert.EqualValues(t, 2, srv.queries.Load(), "and no longer")
}

func TestLookupPathTruncatedRetriesOverTCP(t *testing.T) {
	srv := startFakeDNS(t, func(q *dns.Msg) []byte {
		m := reply(q)
		m.Truncated = true
		return pack(m)
	}, func(q *dns.Msg) *dns.Msg { return reply(q, "big.test. 60 IN A 192.0.2.9") })
	addrs, err := testResolver(nil).LookupPath(context.Background(), loPath(srv), "tcp", "big.test")
	require.NoError(t, err)
	assert.Equal(t, []string{"192.0.2.9"}, addrStrings(addrs))
}

func TestLookupPathRejectsBadReplies(t *testing.T) {
	good := startFakeDNS(t, answering("www.test. 60 IN A 192.0.2.1"), nil)
	for name, bad := range map[string]func(q *dns.Msg) []byte{
		"malformed": func(*dns.Msg) []byte { return []byte{0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1} },
		"mismatched ID": func(q *dns.Msg) []byte {
			m := reply(q, "www.test. 60 IN A 203.0.113.66")
			m.Id++
			return pack(m)
		},
		"wrong question": func(q *dns.Msg) []byte {
			m := reply(q)
			m.Question[0].Name = "evil.test."
			rr, _ := dns.NewRR("evil.test. 60 IN A 203.0.113.66")
			m.Answer = []dns.RR{rr}
			return pack(m)
		},
		"not a response": func(q *dns.Msg) []byte {
			m := reply(q, "www.test. 60 IN A 203.0.113.66")
			m.Response = false
			return pack(m)
		},
		"server failure": func(q *dns.Msg) []byte {
			m := reply(q)
			m.Rcode = dns.RcodeServerFailure
			return pack(m)
		},
		"oversized": func(q *dns.Msg) []byte {
			m := reply(q, "www.test. 60 IN A 203.0.113.66")
			for range 200 {
				rr, _ := dns.NewRR("www.test. 60 IN TXT \"" + string(make([]byte, 200)) + "\"")
				m.Extra = append(m.Extra, rr)
			}
			return pack(m)
		},
		"timeout": func(*dns.Msg) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			srv := startFakeDNS(t, bad, nil)
			r := testResolver(nil)
			p := loPath(srv, good)
			addrs, err := r.LookupPath(context.Background(), p, "tcp", "www.test")
			require.NoError(t, err)
			assert.Equal(t, []string{"192.0.2.1"}, addrStrings(addrs), "the bad reply is never trusted")
			assert.EqualValues(t, 1, srv.queries.Load())

			// The server that answered is asked first next time.
			_, err = r.LookupPath(context.Background(), p, "tcp", "other.test")
			require.Error(t, err)
			assert.EqualValues(t, 1, srv.queries.Load(), "rotated away from the bad server")
		})
	}
}

func TestLookupPathTimeout(t *testing.T) {
	srv := startFakeDNS(t, func(*dns.Msg) []byte { return nil }, nil)
	r := testResolver(nil)
	r.Attempts = 2
	_, err := r.LookupPath(context.Background(), loPath(srv), "tcp", "slow.test")
	var de *net.DNSError
	require.ErrorAs(t, err, &de)
	assert.True(t, de.IsTimeout, "%v", err)
	assert.EqualValues(t, 2, srv.queries.Load(), "one query per attempt")
}

func TestLookupPathSearchDomains(t *testing.T) {
	srv := startFakeDNS(t, answering("www.corp.test. 60 IN A 192.0.2.3"), nil)
	p := loPath(srv)
	p.Search = []string{"lab.test", "corp.test"}
	addrs, err := testResolver(nil).LookupPath(context.Background(), p, "tcp", "www")
	require.NoError(t, err)
	assert.Equal(t, []string{"192.0.2.3"}, addrStrings(addrs))
	assert.Equal(t, []string{"www.lab.test. A", "www.corp.test. A"}, srv.questions())
}

func TestLookupPathHostsFile(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("# comment\n192.0.2.50 printer.lan printer # office\n2001:db8::50 printer.lan\n"), 0o644))
	srv := startFakeDNS(t, answering(), nil)
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: loopbackName(t), DNS: []string{srv.addr.String()}}},
		HostsFile: hosts, ResolvConf: filepath.Join(dir, "none"), NoWatch: true})
	require.NoError(t, err)
	p := m.Paths()[0]
	addrs, err := m.Resolver().LookupPath(context.Background(), p, "tcp", "PRINTER")
	require.NoError(t, err)
	assert.Equal(t, []string{"192.0.2.50"}, addrStrings(addrs), "only the families the path has")
	assert.Zero(t, srv.queries.Load())
}

func TestLookupPathNoServers(t *testing.T) {
	_, err := testResolver(nil).LookupPath(context.Background(), loPath(), "tcp", "www.test")
	assert.ErrorContains(t, err, "path lo has no DNS servers")
}

func TestLookupPathCancelled(t *testing.T) {
	srv := startFakeDNS(t, func(*dns.Msg) []byte { return nil }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := testResolver(nil)
	r.Timeout = time.Minute
	_, err := r.LookupPath(ctx, loPath(srv), "tcp", "www.test")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
}

func loopbackName(t *testing.T) string {
	ifs, err := net.Interfaces()
	require.NoError(t, err)
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 {
			return ifi.Name
		}
	}
	t.Skip("no loopback interface")
	return ""
}

// A name no host can have is answered at once, as Go's resolver does,
// without asking a server: an answer would name it escaped (a\ b.test.)
// and never match the question as sent, so the lookup would wait out its
// timeout although the server answered.
func TestLookupPathRejectsNamesNoHostCanHave(t *testing.T) {
	srv := startFakeDNS(t, func(q *dns.Msg) []byte {
		return pack(reply(q, q.Question[0].Name+" 60 IN A 192.0.2.1"))
	}, nil)
	r := testResolver(nil)
	p := loPath(srv)
	addrs, err := r.LookupPath(context.Background(), p, "tcp", "plain.test")
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.1")}, addrs)
	asked := srv.queries.Load()
	for _, name := range []string{"a b.test", "a(b).test", "café.test", "a\x00b.test", "-a.test", strings.Repeat("a", 64) + ".test"} {
		_, err := r.LookupPath(context.Background(), p, "tcp", name)
		var dnsErr *net.DNSError
		if assert.ErrorAs(t, err, &dnsErr, "%q", name) {
			assert.True(t, dnsErr.IsNotFound, "%q: %v", name, err)
		}
	}
	assert.Equal(t, asked, srv.queries.Load(), "no server asked")
}

// A nil *Path (Manager.Path of an unknown interface) is an error, not a
// panic, wherever one is taken.
func TestNilPath(t *testing.T) {
	_, err := testResolver(nil).LookupPath(context.Background(), nil, "tcp", "x.test")
	assert.ErrorContains(t, err, "nil *Path")
	var p *Path
	assert.Equal(t, "system", p.String())
	assert.Equal(t, Estimate{}, p.Estimate())
	_, ok := p.Addr(netip.MustParseAddr("192.0.2.1"))
	assert.False(t, ok)
}

// NewManager rejects a configuration that can never work, naming what is
// wrong: two paths of one name (one would answer from the other's DNS
// cache), and servers at port 0 or with a name no certificate can show.
func TestNewManagerRejectsBadPathConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		pc   []PathConfig
		want string
	}{
		{"two paths of one name", []PathConfig{{Interface: "lo", DNS: []string{"127.0.0.1"}}, {Interface: "lo", DNS: []string{"127.0.0.2"}}}, "path lo configured twice"},
		{"DNS at port 0", []PathConfig{{Interface: "lo", DNS: []string{"127.0.0.1:0"}}}, "port 0"},
		{"DoT at port 0", []PathConfig{{Interface: "lo", DNSOverTLS: []string{"127.0.0.1:0#dot.test"}}}, "port 0"},
		{"DoH at port 0", []PathConfig{{Interface: "lo", DNSOverHTTPS: []string{"https://dns.example/dns-query#127.0.0.1:0"}}}, "port 0"},
		{"DoT name with a space", []PathConfig{{Interface: "lo", DNSOverTLS: []string{"127.0.0.1#a b"}}}, "no name a certificate can show"},
		{"DoT name with a NUL", []PathConfig{{Interface: "lo", DNSOverTLS: []string{"127.0.0.1#a\x00b"}}}, "no name a certificate can show"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewManager(Config{Paths: tc.pc, NoWatch: true})
			if m != nil {
				m.Close()
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
