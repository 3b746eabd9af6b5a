package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
)

// counts are a limit listener's places held, clients waiting and guests.
func (l *limitListener) counts() (held, parked, guests int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held), len(l.parked), l.guests
}

// The limit listener holds at most n places: a client beyond waits while
// every held connection is busy, takes a place when one closes, and
// Close ends the wait and closes the clients still waiting.
func TestLimitListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ll := newLimitListener(l, 1, nil)
	ll.grace = time.Hour // a connection without a request is never closed for another here
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		clients = append(clients, c)
	}
	first, err := ll.Accept()
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, parked, _ := ll.counts(); return parked == 2 }, 10*time.Second, time.Millisecond,
		"the only place is held: the others wait")
	require.NoError(t, first.Close())
	second, err := ll.Accept()
	require.NoError(t, err, "closing gives the place to the first waiting")
	held, parked, _ := ll.counts()
	assert.Equal(t, []int{1, 1}, []int{held, parked})
	ll.setState(second, stateActive)

	waiting := make(chan error, 1)
	go func() {
		_, err := ll.Accept()
		waiting <- err
	}()
	require.NoError(t, ll.Close())
	select {
	case err := <-waiting:
		assert.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the wait for a place")
	}
	clients[2].SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = clients[2].Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "a client still waiting is closed with the listener")
	second.Close()
}

// proxyGet sends a GET for url through the proxy at addr on c (dialled
// afresh if nil) and reads the response; c is left open.
func proxyGet(t *testing.T, c net.Conn, url string) (*http.Response, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	host := strings.TrimPrefix(url, "http://")
	_, err := io.WriteString(c, "GET "+url+"/ HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// At the limit a new client takes the place of the client idle longest
// between requests, at once, rather than wait for an idle timeout; with
// none idle, of a connection that has sent no request for the grace (a
// TLS handshake never started, a SOCKS5 greeting stopped halfway).
func TestIdleClientsMakeRoom(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.MaxClients = 2 })
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		defer c.Close()
		resp, _ := proxyGet(t, c, upstream.URL)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		idle = append(idle, c)
	}
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	resp, body := proxyGet(t, c, upstream.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	idle[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = idle[0].Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the client idle longest made room")
	resp, _ = proxyGet(t, idle[1], upstream.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the other idle client is still served")

	// Two connections that never send a request hold both places; a new
	// client is served once their grace is over.
	q := newTestProxy(t, intents.Intents{}, func(s *Server) { s.MaxClients = 2 })
	for range 2 {
		silent, err := net.Dial("tcp", q.addr)
		require.NoError(t, err)
		defer silent.Close()
	}
	c, err = net.Dial("tcp", q.addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	resp, body = proxyGet(t, c, upstream.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	t.Logf("served after %v behind two silent connections", time.Since(start))
}

// A client that Allow does not admit takes no place: thousands of its
// connections leave an allowed client served, and only a few of them are
// kept to be told why.
func TestClientsNotAllowedTakeNoPlace(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	allowed := netip.MustParseAddr("127.0.0.2")
	from := dialerFrom(t, allowed)
	p := newTestProxy(t, intents.Intents{}, func(s *Server) {
		s.MaxClients = 4
		s.Allow = []netip.Prefix{netip.PrefixFrom(allowed, 32)}
	})
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.Dial("tcp", p.addr) // from 127.0.0.1, not allowed
		require.NoError(t, err)
		held = append(held, c)
	}
	c, err := from.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	resp, body := proxyGet(t, c, upstream.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)

	resp, body = proxyGet(t, held[0], upstream.URL)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a client not allowed is told so: %s", body)
	ll := p.limited()
	require.NotNil(t, ll)
	_, parked, guests := ll.counts()
	assert.Zero(t, parked, "no client waits")
	assert.LessOrEqual(t, guests, maxGuests)
}

// limited is the limit listener of p's HTTP listener, once it serves.
func (p *testProxy) limited() *limitListener {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ll := range p.limits {
		if ll.Addr().String() == p.addr {
			return ll
		}
	}
	return nil
}

// A client that is not allowed takes a guest's pass to be told 403, and
// gives it back when it goes: after many more such clients than there
// are passes, one after another, the next is still told why.
func TestGuestPassesGivenBack(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.Allow = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} })
	for i := range 2 * maxGuests {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		resp, body := proxyGet(t, c, upstream.URL)
		c.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "client %d: %s", i, body)
	}
	ll := p.limited()
	require.NotNil(t, ll)
	require.Eventually(t, func() bool { _, _, guests := ll.counts(); return guests == 0 }, 10*time.Second, time.Millisecond, "every pass given back")
}

// At the limit a silent connection (no request for the grace, nothing in
// its socket) makes room before one whose request waits unread, however
// much older that one is: a server slow to read on a busy machine does
// not fail the clients it has yet to serve.
func TestUnreadRequestKeepsItsPlace(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ll := newLimitListener(l, 2, nil)
	ll.grace = 50 * time.Millisecond
	defer ll.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	unread := dial()
	_, err = io.WriteString(unread, "GET http://example.com/ HTTP/1.1\r\n\r\n")
	require.NoError(t, err)
	held, err := ll.Accept()
	require.NoError(t, err)
	defer held.Close()
	require.Eventually(t, func() bool { return bytesWaiting(unwrapLimitConn(held).Conn) }, 10*time.Second, time.Millisecond)
	silent := dial()
	silentHeld, err := ll.Accept()
	require.NoError(t, err)
	defer silentHeld.Close()
	dial() // the new client, waiting for a place
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = silent.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the silent connection made room")
	third, err := ll.Accept()
	require.NoError(t, err, "the new client has the silent one's place")
	defer third.Close()
	held.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := held.Read(make([]byte, 64))
	assert.NoError(t, err, "the older connection, its request unread, is still open")
	assert.Positive(t, n)
}

// A keep-alive client idle between requests keeps its place while a
// flood of connections that send nothing comes and goes: they make room
// for each other, and each of its requests is answered on its one
// connection.
func TestKeepAliveClientOutlastsSilentFlood(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.MaxClients = 2 })
	keepAlive, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer keepAlive.Close()
	for i := range 3 {
		resp, body := proxyGet(t, keepAlive, upstream.URL)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		// Two silent connections: the second waits for a place until the
		// first's grace ends, and takes it.
		first, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		defer first.Close()
		second, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		defer second.Close()
		first.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = first.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "the silent connection made room, not the keep-alive client (round %d)", i)
	}
	resp, body := proxyGet(t, keepAlive, upstream.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}

// otherHosts has loopback addresses stand for other hosts' clients for
// the test: the host's own programs hold every place, others a share.
func otherHosts(t *testing.T) {
	was := isHostAddr
	isHostAddr = func(netip.Addr) bool { return false }
	t.Cleanup(func() { isHostAddr = was })
}

// One client address holds at most a quarter of a listener's places:
// its requests hanging at an origin that never answers leave another
// client its place, and it is answered.
func TestOneAddressHoldsAShareOfPlaces(t *testing.T) {
	otherHosts(t)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(release)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	const places = 8
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.MaxClients = places })
	dialFrom := func(from string) net.Conn {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", p.addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range places {
		c := dialFrom("127.0.0.2")
		_, err := io.WriteString(c, "GET "+hanging.URL+"/ HTTP/1.1\r\nHost: "+strings.TrimPrefix(hanging.URL, "http://")+"\r\n\r\n")
		require.NoError(t, err)
	}
	resp, body := proxyGet(t, dialFrom("127.0.0.3"), upstream.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	var ll *limitListener
	p.mu.Lock()
	for _, l := range p.limits {
		if l.Addr().String() == p.addr {
			ll = l
		}
	}
	p.mu.Unlock()
	require.NotNil(t, ll)
	held, parked, _ := ll.counts()
	assert.Equal(t, places/4+1, held, "the hanging client's share, and the other client")
	assert.Equal(t, places-places/4, parked, "the rest of the hanging client's connections wait")
}

// Waiting clients of an address that holds its share are closed, oldest
// first, when the queue is full: else they would stop the accepting of
// every other client.
func TestFullQueueShedsAnAddressOverItsShare(t *testing.T) {
	otherHosts(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ll := newLimitListener(l, 4, nil) // a share of one place
	ll.grace, ll.parkMax = time.Hour, 2
	defer ll.Close()
	dialFrom := func(from string) net.Conn {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	var flood []net.Conn
	for range 4 {
		flood = append(flood, dialFrom("127.0.0.2"))
	}
	first, err := ll.Accept()
	require.NoError(t, err)
	defer first.Close()
	flood[1].SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = flood[1].Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the oldest waiting over its share was closed")
	dialFrom("127.0.0.3")
	other, err := ll.Accept()
	require.NoError(t, err)
	defer other.Close()
	assert.Equal(t, "127.0.0.3", clientOf(other.RemoteAddr().String()).String(), "another address is accepted and served")
}
