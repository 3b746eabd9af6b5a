package dnsclient

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sockintents/intents/internal/testbed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loopback dials servers over loopback, counting its dials.
func loopback(dials *atomic.Int32) Route {
	return Route{Name: "lo", Dial: func(ctx context.Context, network string, server netip.AddrPort) (net.Conn, error) {
		if dials != nil {
			dials.Add(1)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, server.String())
	}}
}

func question(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(EDNSSize, false)
	return m
}

func answer(q *dns.Msg, rrs ...string) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		m.Answer = append(m.Answer, rr)
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

// udpServer answers each query with the datagrams reply returns, in
// order; it stops when t ends.
func udpServer(t *testing.T, reply func(q *dns.Msg) [][]byte) netip.AddrPort {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			for _, b := range reply(q) {
				_, _ = pc.WriteTo(b, from)
			}
		}
	})
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// Over UDP anyone who guesses the port can answer: a datagram that does
// not parse, is longer than the size the query advertised, or answers
// another query is passed over, and the genuine answer after it taken.
func TestExchangeTakesOnlyTheAnswer(t *testing.T) {
	server := udpServer(t, func(q *dns.Msg) [][]byte {
		wrongID := answer(q, "a.test. 60 IN A 192.0.2.66")
		wrongID.Id++
		other := question("b.test.")
		other.Id = q.Id
		return [][]byte{
			[]byte("not DNS"),
			pack(wrongID),
			make([]byte, EDNSSize+1),
			pack(answer(other, "b.test. 60 IN A 192.0.2.67")),
			pack(answer(q, "a.test. 60 IN A 192.0.2.1")),
		}
	})
	var c Client
	defer c.Close()
	q := question("a.test.")
	reply, err := c.Exchange(context.Background(), loopback(nil), server, q)
	require.NoError(t, err)
	addrs, _ := Extract(reply, "a.test.", dns.TypeA)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.1")}, addrs)
}

// A truncated UDP reply is asked for again over TCP.
func TestExchangeTruncatedGoesOverTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pc, err := net.ListenPacket("udp", l.Addr().String())
	require.NoError(t, err)
	full := &dns.Server{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		_ = w.WriteMsg(answer(q, "a.test. 60 IN A 192.0.2.1", "a.test. 60 IN A 192.0.2.2"))
	})}
	cut := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := answer(q)
		m.Truncated = true
		_ = w.WriteMsg(m)
	})}
	var wg sync.WaitGroup
	for _, s := range []*dns.Server{full, cut} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		wg.Go(func() { _ = s.ActivateAndServe() })
		<-started
	}
	defer func() {
		_ = full.Shutdown()
		_ = cut.Shutdown()
		wg.Wait()
	}()
	var c Client
	defer c.Close()
	var dials atomic.Int32
	reply, err := c.Exchange(context.Background(), loopback(&dials), netip.MustParseAddrPort(l.Addr().String()), question("a.test."))
	require.NoError(t, err)
	assert.False(t, reply.Truncated)
	assert.Len(t, reply.Answer, 2, "the whole answer, over TCP")
	assert.EqualValues(t, 2, dials.Load(), "UDP, then TCP")
}

// An exchange ends with its context, and within the Client's Timeout
// when the server stays silent.
func TestExchangeEndsWithTheContextOrTheTimeout(t *testing.T) {
	silent := udpServer(t, func(*dns.Msg) [][]byte { return nil })
	c := Client{Timeout: 50 * time.Millisecond}
	defer c.Close()
	_, err := c.Exchange(context.Background(), loopback(nil), silent, question("a.test."))
	var nerr net.Error
	require.ErrorAs(t, err, &nerr)
	assert.True(t, nerr.Timeout(), "%v", err)

	c.Timeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Exchange(ctx, loopback(nil), silent, question("a.test."))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		require.Fail(t, "the exchange did not end with its context")
	}
}

func TestCheckReply(t *testing.T) {
	q := question("a.test.")
	ok := answer(q, "a.test. 60 IN A 192.0.2.1")
	assert.NoError(t, CheckReply(q, ok))
	nx := answer(q)
	nx.Rcode = dns.RcodeNameError
	assert.NoError(t, CheckReply(q, nx), "a name that does not exist is an answer")
	fail := answer(q)
	fail.Rcode = dns.RcodeServerFailure
	assert.ErrorContains(t, CheckReply(q, fail), "SERVFAIL", "the next server may know")
	notResponse := answer(q)
	notResponse.Response = false
	assert.Error(t, CheckReply(q, notResponse))
	aaaa := answer(q)
	aaaa.Question[0].Qtype = dns.TypeAAAA
	assert.Error(t, CheckReply(q, aaaa), "another question")
}

func TestExtract(t *testing.T) {
	q := question("www.test.")
	// A chain of CNAMEs to the addresses, the smallest TTL on the way;
	// records of another name, type or class are no answer.
	reply := answer(q,
		"www.test. 300 IN CNAME edge.test.",
		"edge.test. 30 IN CNAME node.cdn.test.",
		"node.cdn.test. 600 IN A 192.0.2.1",
		"node.cdn.test. 600 CH A 192.0.2.99",
		"other.test. 1 IN A 192.0.2.98")
	addrs, ttl := Extract(reply, "www.test.", dns.TypeA)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.1")}, addrs)
	assert.Equal(t, 30*time.Second, ttl)

	// A TTL with the top bit set counts as 0 (RFC 2181 §8).
	addrs, ttl = Extract(answer(q, "www.test. 2147483648 IN A 192.0.2.1"), "www.test.", dns.TypeA)
	assert.Len(t, addrs, 1)
	assert.Zero(t, ttl)

	// No address: the SOA's negative TTL, at most MaxNegativeTTL; none
	// without an SOA.
	empty := answer(q)
	soa, err := dns.NewRR("test. 3600 IN SOA ns.test. admin.test. 1 7200 900 1209600 86400")
	require.NoError(t, err)
	empty.Ns = append(empty.Ns, soa)
	addrs, ttl = Extract(empty, "www.test.", dns.TypeA)
	assert.Empty(t, addrs)
	assert.Equal(t, MaxNegativeTTL, ttl)
	_, ttl = Extract(answer(q), "www.test.", dns.TypeA)
	assert.Zero(t, ttl)

	// A loop of CNAMEs ends.
	addrs, _ = Extract(answer(q, "www.test. 60 IN CNAME loop.test.", "loop.test. 60 IN CNAME www.test."), "www.test.", dns.TypeA)
	assert.Empty(t, addrs)
}

// dotServer is a DNS-over-TLS server on loopback answering every query
// with 192.0.2.1; conns counts its connections. It stops when t ends.
func dotServer(t *testing.T, conns *atomic.Int32) (netip.AddrPort, *tls.Config) {
	ca, err := testbed.NewCA()
	require.NoError(t, err)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.Cert}})
	require.NoError(t, err)
	srv := &dns.Server{Listener: countConns{l, conns}, Net: "tcp-tls", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		_ = w.WriteMsg(answer(q, q.Question[0].Name+" 60 IN A 192.0.2.1"))
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ActivateAndServe() })
	<-started
	t.Cleanup(func() {
		_ = srv.Shutdown()
		wg.Wait()
	})
	return netip.MustParseAddrPort(l.Addr().String()), &tls.Config{RootCAs: ca.Pool}
}

type countConns struct {
	net.Listener
	n *atomic.Int32
}

func (l countConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// A DNS-over-TLS connection is kept between queries, one per route and
// server; Forget closes a route's, Close every one, and a closed Client
// keeps none.
func TestExchangeTLSKeepsAConnectionPerRoute(t *testing.T) {
	var conns atomic.Int32
	server, cfg := dotServer(t, &conns)
	c := Client{TLSConfig: cfg}
	a, b := loopback(nil), loopback(nil)
	b.Name = "other"
	ask := func(r Route) {
		t.Helper()
		reply, err := c.ExchangeTLS(context.Background(), r, server, "localhost", question("a.test."))
		require.NoError(t, err)
		require.Len(t, reply.Answer, 1)
	}
	ask(a)
	ask(a)
	assert.EqualValues(t, 1, conns.Load(), "kept for the second query")
	ask(b)
	assert.EqualValues(t, 2, conns.Load(), "a route of its own")
	c.Forget(func(route string) bool { return route == "other" })
	ask(a)
	assert.EqualValues(t, 2, conns.Load(), "the other route's went, not this one's")
	ask(b)
	assert.EqualValues(t, 3, conns.Load())

	_, err := c.ExchangeTLS(context.Background(), a, server, "wrong.example", question("a.test."))
	assert.ErrorContains(t, err, "DNS over TLS with "+server.String()+"#wrong.example", "the kept connection was not for this name")
	c.Close()
	ask(a) // dialed, used and closed: nothing is kept once closed
	c.mu.Lock()
	assert.Empty(t, c.dot)
	c.mu.Unlock()
}
