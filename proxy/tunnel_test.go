package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xproxy "golang.org/x/net/proxy"

	"github.com/sockintents/intents"
)

// connectFrom opens an HTTP/1.1 CONNECT tunnel to target through the
// proxy at addr, from the local address from (any if invalid), and
// returns the connection and the status; the connection is closed with
// the test.
func connectFrom(t *testing.T, from netip.Addr, addr, target string) (net.Conn, int, string) {
	t.Helper()
	d := &net.Dialer{}
	if from.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
	}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	var body []byte
	if resp.StatusCode != http.StatusOK {
		body, _ = io.ReadAll(resp.Body)
	}
	c.SetDeadline(time.Time{})
	return c, resp.StatusCode, string(body)
}

// A tunnel gives its client's place back, so when the tunnels run out a
// CONNECT is answered 503 instead of waiting unanswered; and one client
// address holds at most its share of them.
func TestTunnelsRefusedWhenFull(t *testing.T) {
	target := echoServer(t, nil)
	// The last ones come from another address, whose share is untouched:
	// the proxy's own limit refuses them.
	second := netip.MustParseAddr("127.0.0.2")
	fromSecond := dialerFrom(t, second)
	p := newTestProxy(t, intents.Intents{}, func(s *Server) {
		s.MaxClients, s.MaxTunnels, s.MaxTunnelsPerClient = 1, 2, 2
	})
	for range 2 {
		c, status, body := connectFrom(t, netip.Addr{}, p.addr, target)
		require.Equal(t, http.StatusOK, status, body)
		_, err := io.WriteString(c, "ping")
		require.NoError(t, err)
		_, err = io.ReadFull(c, make([]byte, 4))
		require.NoError(t, err, "the tunnel works")
	}
	_, status, body := connectFrom(t, second, p.addr, target)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "too many tunnels")
	d, err := xproxy.SOCKS5("tcp", p.socks, nil, fromSecond)
	require.NoError(t, err)
	_, err = d.Dial("tcp", target)
	assert.ErrorContains(t, err, "general SOCKS server failure", "SOCKS5 tells its client")

	// The host's own programs are the owner: a client's share (one
	// tunnel here) does not bound them, MaxTunnels does.
	q := newTestProxy(t, intents.Intents{}, func(s *Server) { s.MaxTunnels, s.MaxTunnelsPerClient = 3, 1 })
	for _, from := range []netip.Addr{{}, {}, second} {
		_, status, body = connectFrom(t, from, q.addr, target)
		require.Equal(t, http.StatusOK, status, "the host's programs hold every tunnel: %s", body)
	}
	_, status, body = connectFrom(t, netip.Addr{}, q.addr, target)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "too many tunnels", "and no more")
}

// A tunnel quiet both ways for TunnelIdleTimeout is closed, over
// HTTP/1.1, SOCKS5 and HTTP/2; one that carries a byte now and then
// within the timeout is not.
func TestTunnelIdleTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	target := echoServer(t, nil)
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.TunnelIdleTimeout = timeout })

	quiet, status, _ := connectFrom(t, netip.Addr{}, p.addr, target)
	require.Equal(t, http.StatusOK, status)
	busy, status, _ := connectFrom(t, netip.Addr{}, p.addr, target)
	require.Equal(t, http.StatusOK, status)
	d, err := xproxy.SOCKS5("tcp", p.socks, nil, xproxy.Direct)
	require.NoError(t, err)
	socks, err := d.Dial("tcp", target)
	require.NoError(t, err)
	defer socks.Close()

	start := time.Now()
	for time.Since(start) < 4*timeout {
		busy.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := io.WriteString(busy, "x")
		require.NoError(t, err)
		_, err = io.ReadFull(busy, make([]byte, 1))
		require.NoError(t, err, "a tunnel in use is kept")
		time.Sleep(timeout / 4) // the client's pace, not a wait for the proxy
	}
	for name, c := range map[string]net.Conn{"HTTP/1.1": quiet, "SOCKS5": socks} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.EOF, "%s: a quiet tunnel is closed", name)
	}

	h2 := newTLSProxy(t, func(s *Server) { s.TunnelIdleTimeout = timeout })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, resp, err := connectStream(ctx, t, h2.h2Conn(t), target)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	closed := make(chan struct{})
	defer context.AfterFunc(ctx, func() { // a bound on the test, if the stream is never reset
		close(closed)
		resp.Body.Close()
	})()
	_, err = io.ReadAll(resp.Body)
	assert.Error(t, err, "HTTP/2: a quiet tunnel's stream is reset")
	select {
	case <-closed:
		t.Error("HTTP/2: a quiet tunnel's stream was not reset")
	default:
	}
}

// A client's share of the tunnels is its address's, or for IPv6 its
// /64's: one host holding a /64 cannot take more by changing addresses.
func TestTunnelShareIsPerSlash64(t *testing.T) {
	s := &Server{MaxTunnels: 8, MaxTunnelsPerClient: 1}
	s.init()
	take := func(remote string) error { return s.takeTunnel(shareOf(remote), ownedByHost(remote)) }
	require.NoError(t, take("[2001:db8::1]:1000"))
	defer s.endTunnel(shareOf("[2001:db8::1]:1000"))
	assert.ErrorIs(t, take("[2001:db8::ffff:2]:1000"), errTooManyClientTunnels, "the same /64")
	require.NoError(t, take("[2001:db8:0:1::1]:1000"), "another /64")
	defer s.endTunnel(shareOf("[2001:db8:0:1::1]:1000"))
	require.NoError(t, take("192.0.2.1:1000"))
	defer s.endTunnel(shareOf("192.0.2.1:1000"))
	assert.ErrorIs(t, take("192.0.2.1:2000"), errTooManyClientTunnels, "one address, one share")
	assert.NoError(t, take("192.0.2.2:1000"), "IPv4: each address its own")
	s.endTunnel(shareOf("192.0.2.2:1000"))
	for range 2 {
		for _, host := range []string{"127.0.0.1:1000", "[::1]:1000"} {
			require.True(t, ownedByHost(host))
			require.NoError(t, take(host), "%s: the host's own programs are bound by MaxTunnels alone", host)
			defer s.endTunnel(shareOf(host))
		}
	}
}

// A tunnel's copies hold a buffer or a pipe only while bytes move: quiet
// tunnels hold none, however many are open, and what moves arrives byte
// for byte.
func TestQuietTunnelsHoldNoBuffer(t *testing.T) {
	target := echoServer(t, nil)
	p := newTestProxy(t, intents.Intents{}, nil)
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for i := range 20 {
		c, status, body := connectFrom(t, netip.Addr{}, p.addr, target)
		require.Equal(t, http.StatusOK, status, body)
		msg := []byte("ping")
		if i == 0 {
			msg = want
		}
		go c.Write(msg)
		got := make([]byte, len(msg))
		_, err := io.ReadFull(c, got)
		require.NoError(t, err)
		require.True(t, bytes.Equal(msg, got), "echoed byte for byte")
	}
	// The last write's buffer goes back just after the echo is out.
	assert.Eventually(t, func() bool { return relayBuffersOut.Load() == 0 && relayPipesOut.Load() == 0 }, 10*time.Second, time.Millisecond,
		"lent to 20 quiet tunnels: %d buffers, %d pipes", relayBuffersOut.Load(), relayPipesOut.Load())
}

// What the tunnels taught of each host is kept with the Knowledge of the
// Manager that places them: a proxy started again from it expects of a
// host's next tunnel what the one before would have, and the file names
// no host in clear. Without Knowledge the memory is the proxy's own.
func TestTunnelSizesOutliveTheProxy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "paths.json")
	start := func(knowledge string) (*intents.Manager, *Server) {
		m, err := intents.NewManager(intents.Config{NoWatch: true, Knowledge: knowledge})
		require.NoError(t, err)
		s := &Server{Transport: &intents.Transport{Manager: m}, Dialer: &intents.Dialer{Manager: m}}
		s.init()
		return m, s
	}
	hosts := []string{"a.example", "B.example", "c.example"}
	predictions := func(s *Server) []int64 {
		var out []int64
		for _, h := range hosts {
			out = append(out, s.sizes.predict(h))
		}
		return out
	}
	m, s := start(file)
	for i, n := range []int64{1000, 3000, 500, 7, 8, 9, 10, 11, 12} {
		s.sizes.learn(hosts[i%2], n)
	}
	want := predictions(s)
	assert.Equal(t, []int64{12, 9, 0}, want, "each host's last five, the lower middle")
	require.NoError(t, s.Close())
	require.NoError(t, m.Close())
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.NotContains(t, strings.ToLower(string(b)), "example", "no host in clear")

	m2, s2 := start(file)
	defer m2.Close()
	defer s2.Close()
	assert.Equal(t, want, predictions(s2))
	s.sizes.learn("a.example", 1)
	s2.sizes.learn("a.example", 1)
	assert.Equal(t, predictions(s), predictions(s2), "and goes on as it would have")

	m3, s3 := start("")
	defer m3.Close()
	defer s3.Close()
	s3.sizes.learn("a.example", 5)
	assert.Equal(t, []int64{5, 0, 0}, predictions(s3), "its own memory, without Knowledge")
}

// A tunnel's place, and its client's share, are given back when it
// ends: a client that opens and closes tunnels one after another is
// never refused. Without a share set, a client other than the host's
// holds a quarter of MaxTunnels.
func TestTunnelPlacesGivenBack(t *testing.T) {
	s := &Server{MaxTunnels: 8}
	s.init()
	client := shareOf("192.0.2.1:1000")
	for range 20 {
		require.NoError(t, s.takeTunnel(client, false))
		s.endTunnel(client)
	}
	assert.Zero(t, s.tunnels)
	assert.Empty(t, s.tunnelsOf)
	for range 2 {
		require.NoError(t, s.takeTunnel(client, false))
		defer s.endTunnel(client)
	}
	assert.ErrorIs(t, s.takeTunnel(client, false), errTooManyClientTunnels, "a quarter of 8")
}

// A name that resolves to the proxy's own host is refused once its
// socket connects there, as the address itself is, unless AllowLocal.
func TestTunnelToANameOfTheHostRefused(t *testing.T) {
	target := echoServer(t, nil)
	_, port, _ := net.SplitHostPort(target)
	hosts := filepath.Join(t.TempDir(), "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 sneaky.test\n"), 0o644))
	p := newTestProxy(t, intents.Intents{}, func(s *Server) {
		m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "lo"}}, NoWatch: true, ResolvConf: os.DevNull, HostsFile: hosts})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		s.Dialer = &intents.Dialer{Manager: m}
		s.AllowLocal = false
	})
	_, status, body := connectFrom(t, netip.Addr{}, p.addr, "sneaky.test:"+port)
	assert.Equal(t, http.StatusForbidden, status, body)
	assert.Contains(t, body, "own host")
}

// A tunnel whose client only downloads (it sends nothing, its server
// sends now and then within the timeout) is in use, not idle.
func TestDownloadOnlyTunnelNotIdle(t *testing.T) {
	const timeout = 300 * time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tick := time.NewTicker(timeout / 4)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.TunnelIdleTimeout = timeout })
	c, status, body := connectFrom(t, netip.Addr{}, p.addr, l.Addr().String())
	require.Equal(t, http.StatusOK, status, body)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range 16 { // four timeouts' worth
		_, err := io.ReadFull(c, make([]byte, 1))
		require.NoError(t, err, "a tunnel that downloads is kept")
	}
}
