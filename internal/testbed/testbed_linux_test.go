package testbed

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startBulk serves on port 9000 of every server address: a client sends an
// 8-byte big-endian count N; N > 0 asks the server to send N bytes, N == 0
// to receive until EOF and answer with the count it got.
func startBulk(t *testing.T, tb *Testbed) {
	var l net.Listener
	require.NoError(t, tb.Server.Do(func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		var err error
		l, err = lc.Listen(context.Background(), "tcp", ":9000")
		return err
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var hdr [8]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				if n := int64(binary.BigEndian.Uint64(hdr[:])); n > 0 {
					_, _ = io.Copy(c, io.LimitReader(NewObject(n), n))
					return
				}
				got, _ := io.Copy(io.Discard, c)
				binary.BigEndian.PutUint64(hdr[:], uint64(got))
				_, _ = c.Write(hdr[:])
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
}

// connectTime dials addr from the client namespace (bound to dev if not
// empty) and returns how long the handshake took.
func connectTime(t *testing.T, tb *Testbed, dev, addr string) time.Duration {
	d := &net.Dialer{}
	if dev != "" {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var err error
			_ = c.Control(func(fd uintptr) { err = unix.BindToDevice(int(fd), dev) })
			return err
		}
	}
	// Time the dial alone, inside the namespace: not the setns around it.
	var elapsed time.Duration
	require.NoError(t, tb.Client.Do(func() error {
		start := time.Now()
		c, err := d.DialContext(context.Background(), "tcp", addr)
		elapsed = time.Since(start)
		if err == nil {
			c.Close()
		}
		return err
	}))
	return elapsed
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func TestSelfTest(t *testing.T) {
	spec := Spec{Paths: []PathSpec{Symmetric(20*time.Millisecond, 10e6), Symmetric(60*time.Millisecond, 5e6)}}
	tb := New(t, spec)
	startBulk(t, tb)

	for _, p := range tb.Paths {
		t.Run(fmt.Sprintf("path %d", p.Index), func(t *testing.T) {
			addr := net.JoinHostPort(p.ServerAddr.String(), "9000")
			var rtts []time.Duration
			for range 9 {
				rtts = append(rtts, connectTime(t, tb, "", addr))
			}
			// On a loaded machine the emulator's thread is sometimes
			// scheduled late, which only ever adds delay: the fastest of
			// the handshakes shows the delay the link was set to, and none
			// may be faster than it.
			want := p.Spec.RTT()
			fastest := slices.Min(rtts)
			t.Logf("path %d: connect time fastest %v, median %v (set %v), all %v", p.Index, fastest, median(rtts), want, rtts)
			assert.GreaterOrEqual(t, fastest, want-500*time.Microsecond, "no handshake beats the link's delay")
			assert.LessOrEqual(t, fastest, want+want/20+time.Millisecond, "the fastest within 5%% + 1 ms of it")

			// Bulk goodput: 3 s worth at the link rate, timed from the first
			// byte so the handshake does not count.
			n := p.Spec.Down.Rate * 3 / 8
			before := p.Down.Stats()
			c, err := tb.Client.DialContext(nil)(context.Background(), "tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			var hdr [8]byte
			binary.BigEndian.PutUint64(hdr[:], uint64(n))
			_, err = c.Write(hdr[:])
			require.NoError(t, err)
			first := make([]byte, 1)
			_, err = io.ReadFull(c, first)
			require.NoError(t, err)
			start := time.Now()
			h := sha256.New()
			h.Write(first)
			got2, err := io.Copy(h, c)
			elapsed := time.Since(start)
			require.NoError(t, err)
			require.Equal(t, n, got2+1)
			want2 := sha256.New()
			_, _ = io.Copy(want2, io.LimitReader(NewObject(n), n))
			assert.Equal(t, want2.Sum(nil), h.Sum(nil), "bytes arrive intact and in order")
			goodput := float64(got2*8) / elapsed.Seconds()
			stats := p.Down.Stats()
			t.Logf("path %d: goodput %.2f Mbit/s (set %.2f), link: %d packets, %d bytes, %d drops, late mean %v max %v",
				p.Index, goodput/1e6, float64(p.Spec.Down.Rate)/1e6, stats.Packets-before.Packets,
				stats.Bytes-before.Bytes, stats.Drops-before.Drops, stats.MeanLate(), stats.MaxLate)
			// The shaper lets nothing through faster than the rate, however
			// loaded the machine; a late emulator thread only slows it, so
			// the lower bound is looser.
			assert.LessOrEqual(t, goodput, float64(p.Spec.Down.Rate)*1.03, "goodput never above the rate")
			assert.GreaterOrEqual(t, goodput, float64(p.Spec.Down.Rate)*0.75, "goodput at least 3/4 of the rate on a loaded machine")
			assert.GreaterOrEqual(t, stats.Bytes-before.Bytes, n, "the link carried at least the payload")
		})
	}

	t.Run("SO_BINDTODEVICE steers onto path 2", func(t *testing.T) {
		host := net.JoinHostPort(tb.Hosts[0].String(), "9000")
		var via1, via2 []time.Duration
		for range 5 {
			via1 = append(via1, connectTime(t, tb, "", host)) // routing table: path 1
			via2 = append(via2, connectTime(t, tb, "p2", host))
		}
		t.Logf("to %s: default route %v, bound to p2 %v (fastest of 5)", host, slices.Min(via1), slices.Min(via2))
		assert.InDelta(t, spec.Paths[0].RTT().Seconds(), slices.Min(via1).Seconds(), 0.005)
		assert.InDelta(t, spec.Paths[1].RTT().Seconds(), slices.Min(via2).Seconds(), 0.005)
	})

	t.Run("counters agree with what was sent", func(t *testing.T) {
		p := tb.Paths[0]
		params := p.Up.Params()
		params.Queue = 8 << 20 // no drops, so no retransmitted payload
		p.Up.Set(params)
		defer p.Up.Set(spec.Paths[0].Up)
		before := p.Up.Stats()
		const n = 1 << 20
		c, err := tb.Client.DialContext(nil)(context.Background(), "tcp", net.JoinHostPort(p.ServerAddr.String(), "9000"))
		require.NoError(t, err)
		var hdr [8]byte
		_, err = c.Write(hdr[:]) // 0: upload
		require.NoError(t, err)
		_, err = io.Copy(c, io.LimitReader(NewObject(n), n))
		require.NoError(t, err)
		require.NoError(t, c.(*net.TCPConn).CloseWrite())
		_, err = io.ReadFull(c, hdr[:])
		require.NoError(t, err)
		c.Close()
		assert.EqualValues(t, n, binary.BigEndian.Uint64(hdr[:]), "the server got every byte")
		// Wait for the FIN's ACK exchange to pass the link.
		stats := p.Up.Stats()
		pkts, bytes := stats.Packets-before.Packets, stats.Bytes-before.Bytes
		require.Zero(t, stats.Drops-before.Drops)
		overhead := float64(bytes-n-8) / float64(pkts)
		t.Logf("upload of %d bytes: %d packets, %d bytes on the link, %.1f header bytes per packet", n, pkts, bytes, overhead)
		assert.GreaterOrEqual(t, overhead, 40.0, "every packet has at least IPv4 + TCP headers")
		assert.LessOrEqual(t, overhead, 60.0, "and at most those with options")
	})

	t.Run("TCP counters count the server's retransmissions", func(t *testing.T) {
		p := tb.Paths[0]
		params := p.Down.Params()
		params.Loss = 0.1
		p.Down.Set(params)
		defer p.Down.Set(spec.Paths[0].Down)
		lost0 := p.Down.Stats().Losses
		srv0, err := tb.Server.TCPCounters()
		require.NoError(t, err)
		cli0, err := tb.Client.TCPCounters()
		require.NoError(t, err)
		c, err := tb.Client.DialContext(nil)(context.Background(), "tcp", net.JoinHostPort(p.ServerAddr.String(), "9000"))
		require.NoError(t, err)
		const n = 200 << 10
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], n)
		_, err = c.Write(hdr[:])
		require.NoError(t, err)
		got, err := io.Copy(io.Discard, c)
		require.NoError(t, err)
		c.Close()
		require.EqualValues(t, n, got)
		srv1, err := tb.Server.TCPCounters()
		require.NoError(t, err)
		cli1, err := tb.Client.TCPCounters()
		require.NoError(t, err)
		lost := p.Down.Stats().Losses - lost0
		t.Logf("server %+v, client %+v, %d packets lost on the way down", srv1.Sub(srv0), cli1.Sub(cli0), lost)
		assert.Positive(t, srv1.Sub(srv0).Retransmits, "the server sent again what the link lost")
		assert.Zero(t, cli1.Sub(cli0).Retransmits, "the client's request crossed a lossless link")
	})

	t.Run("link down and up at run time", func(t *testing.T) {
		p := tb.Paths[1]
		addr := net.JoinHostPort(p.ServerAddr.String(), "9000")
		p.SetDown(true)
		losses := p.Up.Stats().Losses
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := tb.Client.DialContext(nil)(ctx, "tcp", addr)
		require.Error(t, err, "nothing passes a link that is down")
		assert.Greater(t, p.Up.Stats().Losses, losses, "the SYN was lost")
		p.SetDown(false)
		connectTime(t, tb, "", addr)
	})
}

// TestFirstFlight checks that the client sees a first flight as the link
// spreads it: ten segments at 20 Mbit/s come 0.6 ms apart, so a client
// woken on time reads the first alone. One kept from running (the
// emulator's sleeping threads holding every P) read them in one late
// burst, and timed the path's capacity by the burst's spread.
func TestFirstFlight(t *testing.T) {
	tb := New(t, Spec{Paths: []PathSpec{Symmetric(10*time.Millisecond, 20e6)}})
	startBulk(t, tb)
	addr := net.JoinHostPort(tb.Paths[0].ServerAddr.String(), "9000")
	const flight = 10 * 1448
	var firsts []int
	for range 9 {
		c, err := tb.Client.DialContext(nil)(context.Background(), "tcp", addr)
		require.NoError(t, err)
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], flight)
		_, err = c.Write(hdr[:])
		require.NoError(t, err)
		buf := make([]byte, 64<<10)
		n, err := c.Read(buf)
		require.NoError(t, err)
		firsts = append(firsts, n)
		_, err = io.Copy(io.Discard, c)
		require.NoError(t, err)
		c.Close()
	}
	t.Logf("first read of a %d-byte flight: %v bytes", flight, firsts)
	slices.Sort(firsts)
	assert.Less(t, firsts[len(firsts)/2], flight/2, "the median first read holds under half the flight")
}

func TestGOMAXPROCS(t *testing.T) {
	RequireRoot(t)
	before := runtime.GOMAXPROCS(0)
	tb, err := Start(Spec{Paths: []PathSpec{Symmetric(20*time.Millisecond, 10e6), Symmetric(60*time.Millisecond, 5e6), {Veth: true}}})
	require.NoError(t, err)
	assert.Equal(t, before+4, runtime.GOMAXPROCS(0), "one P for each of the two emulated paths' two deliverers; none for a veth pair")
	tb2, err := Start(Spec{Paths: []PathSpec{Symmetric(20*time.Millisecond, 10e6)}})
	require.NoError(t, err)
	assert.Equal(t, before+6, runtime.GOMAXPROCS(0), "testbeds side by side add up")
	require.NoError(t, tb.Close())
	assert.Equal(t, before+2, runtime.GOMAXPROCS(0))
	require.NoError(t, tb2.Close())
	assert.Equal(t, before, runtime.GOMAXPROCS(0), "the last Close restores it")
}

func TestServices(t *testing.T) {
	tb := New(t, Spec{Paths: []PathSpec{{Veth: true}, Symmetric(10*time.Millisecond, 50e6)}, Servers: 2})
	servers, err := tb.StartDNS()
	require.NoError(t, err)
	web, err := tb.StartWeb(WebOptions{})
	require.NoError(t, err)

	t.Run("per-path DNS", func(t *testing.T) {
		for i, s := range servers {
			m := new(dns.Msg)
			m.SetQuestion("www.test.", dns.TypeA)
			c, err := tb.Client.DialContext(nil)(context.Background(), "udp", s.Addr.String())
			require.NoError(t, err)
			r, _, err := (&dns.Client{}).ExchangeWithConn(m, &dns.Conn{Conn: c})
			c.Close()
			require.NoError(t, err)
			require.Len(t, r.Answer, 1)
			assert.Equal(t, tb.Hosts[i].String(), r.Answer[0].(*dns.A).A.String(), "path %d's own answer", i+1)
			assert.EqualValues(t, 1, s.Queries())
			assert.Equal(t, map[netip.Addr]int64{tb.Paths[i].ClientAddr: 1}, s.QueriesFrom(), "from path %d's address", i+1)
		}
	})
	t.Run("silent DNS", func(t *testing.T) {
		s := servers[0]
		s.SetSilent(true)
		m := new(dns.Msg)
		m.SetQuestion("www.test.", dns.TypeA)
		c, err := tb.Client.DialContext(nil)(context.Background(), "udp", s.Addr.String())
		require.NoError(t, err)
		defer c.Close()
		n := s.Queries()
		_, _, err = (&dns.Client{Timeout: 200 * time.Millisecond}).ExchangeWithConn(m, &dns.Conn{Conn: c})
		var ne net.Error
		require.ErrorAs(t, err, &ne, "no answer")
		assert.True(t, ne.Timeout())
		assert.Equal(t, n+1, s.Queries(), "the query arrived")
		s.SetSilent(false)
		_, _, err = (&dns.Client{}).ExchangeWithConn(m, &dns.Conn{Conn: c})
		assert.NoError(t, err, "answered again")
	})

	get := func(t *testing.T, dev, url, rng string) (*http.Response, []byte) {
		d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			_ = c.Control(func(fd uintptr) { err = unix.BindToDevice(int(fd), dev) })
			return err
		}}
		tr := &http.Transport{DialContext: tb.Client.DialContext(d), TLSClientConfig: web.ClientTLS(), ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, body
	}
	hostURL := func(scheme string, k int) string {
		return scheme + "://" + tb.Hosts[k].String()
	}

	t.Run("HTTP/2 over TLS, logged per path", func(t *testing.T) {
		n := len(web.Conns())
		resp, body := get(t, "p2", hostURL("https", 1)+"/obj?size=100000", "")
		assert.Equal(t, "HTTP/2.0", resp.Proto)
		assert.Equal(t, 200, resp.StatusCode)
		require.Len(t, body, 100000)
		for i, b := range body {
			if b != ObjectByte(int64(i)) {
				t.Fatalf("byte %d is %d, want %d", i, b, ObjectByte(int64(i)))
			}
		}
		conns := web.Conns()[n:]
		require.Len(t, conns, 1)
		assert.Equal(t, tb.Paths[1].ClientAddr, conns[0].Remote.Addr(), "the server saw path 2's address")
		assert.Equal(t, tb.Hosts[1], conns[0].Local.Addr())
		assert.True(t, conns[0].TLS)
		assert.Equal(t, "HTTP/2.0", conns[0].Proto)
	})
	t.Run("cleartext HTTP/1.1 with Range", func(t *testing.T) {
		resp, body := get(t, "p1", hostURL("http", 0)+"/obj/5000", "bytes=1000-1999")
		assert.Equal(t, "HTTP/1.1", resp.Proto)
		assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
		assert.Equal(t, "bytes 1000-1999/5000", resp.Header.Get("Content-Range"))
		require.Len(t, body, 1000)
		assert.Equal(t, ObjectByte(1000), body[0])
		last := web.Requests()[len(web.Requests())-1]
		assert.Equal(t, "bytes=1000-1999", last.Range)
		assert.EqualValues(t, 1000, last.Bytes)
		assert.Equal(t, tb.Paths[0].ClientAddr, last.Remote.Addr())
	})
	t.Run("restart", func(t *testing.T) {
		// An idle keep-alive connection, then a restart: the connection is
		// closed, and the server answers on a new one.
		for _, graceful := range []bool{false, true} {
			tr := &http.Transport{DialContext: tb.Client.DialContext(nil)}
			req, err := http.NewRequest("GET", hostURL("http", 0)+"/obj/10", nil)
			require.NoError(t, err)
			var conns []string
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn.LocalAddr().String()) }}
			for i := range 2 {
				if i == 1 {
					require.NoError(t, web.Restart(graceful))
				}
				resp, err := tr.RoundTrip(req.WithContext(httptrace.WithClientTrace(context.Background(), trace)))
				require.NoError(t, err, "graceful %v", graceful)
				_, err = io.Copy(io.Discard, resp.Body)
				require.NoError(t, err)
				resp.Body.Close()
			}
			tr.CloseIdleConnections()
			// (net/http may try the closed one first, and then a new one.)
			assert.NotEqual(t, conns[0], conns[len(conns)-1], "a new connection after the restart (graceful %v)", graceful)
		}
	})
	t.Run("virtual hosts", func(t *testing.T) {
		web.Handle("special.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "special")
		}))
		d := &net.Dialer{}
		tr := &http.Transport{DialContext: tb.Client.DialContext(d)}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", hostURL("http", 0)+"/", nil)
		req.Host = "special.test"
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, "special", string(body))
	})
}

// TestNoLeftovers checks that Close leaves no namespace behind and that
// leftovers of dead processes are removed.
func TestNoLeftovers(t *testing.T) {
	RequireRoot(t)
	tb, err := Start(Spec{Paths: []PathSpec{Symmetric(2*time.Millisecond, 0)}})
	require.NoError(t, err)
	require.NoError(t, tb.Close())
	assert.Empty(t, ourNamespaces(t), "Close removed the namespaces")

	// A namespace named after a process that is gone is removed at the next start.
	dead := Prefix + "999999999-cli1"
	require.NoError(t, run("ip", "netns", "add", dead))
	RemoveLeftovers()
	_, err = os.Stat("/var/run/netns/" + dead)
	assert.True(t, errors.Is(err, os.ErrNotExist), "the leftover is gone")
}

func ourNamespaces(t *testing.T) []string {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("%s%d-", Prefix, os.Getpid())) {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestSpecOptions(t *testing.T) {
	tb := New(t, Spec{
		Paths:         []PathSpec{Symmetric(4*time.Millisecond, 0), Symmetric(40*time.Millisecond, 0)},
		PolicyRouting: true,
		MPTCP:         &MPTCPSpec{Endpoints: true},
		TFO:           true,
	})
	startBulk(t, tb)

	out, err := exec.Command("ip", "-n", tb.Client.Name, "mptcp", "endpoint", "show").CombinedOutput()
	require.NoError(t, err)
	assert.Contains(t, string(out), "10.71.2.1", "an endpoint for path 2")
	assert.NotContains(t, string(out), "10.71.1.1", "none for path 1: the first subflow follows the socket")
	out, err = exec.Command("ip", "-n", tb.Client.Name, "mptcp", "limits", "show").CombinedOutput()
	require.NoError(t, err)
	assert.Contains(t, string(out), "subflows 1")
	for _, n := range []*Netns{tb.Client, tb.Server} {
		out, err := exec.Command("ip", "netns", "exec", n.Name, "cat", "/proc/sys/net/ipv4/tcp_fastopen").CombinedOutput()
		require.NoError(t, err)
		assert.Equal(t, "3", strings.TrimSpace(string(out)))
	}

	// With policy routing, the source address alone picks the path.
	host := net.JoinHostPort(tb.Hosts[0].String(), "9000")
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: tb.Paths[1].ClientAddr.AsSlice()}}
	var via2 []time.Duration
	before := tb.Paths[0].Up.Stats().Packets
	for range 5 {
		start := time.Now()
		c, err := tb.Client.DialContext(d)(context.Background(), "tcp", host)
		require.NoError(t, err)
		via2 = append(via2, time.Since(start))
		c.Close()
	}
	assert.Greater(t, median(via2), 30*time.Millisecond, "bound to path 2's address, the connection took path 2")
	assert.Equal(t, before, tb.Paths[0].Up.Stats().Packets, "nothing crossed path 1")
}

// The isolated namespace has a route to the client's gateway and none
// beyond, and no IPv6: no address appears in it after it is made, which a
// browser started there would take for a network change.
func TestIsolated(t *testing.T) {
	tb := New(t, Spec{Paths: []PathSpec{Symmetric(4*time.Millisecond, 0)}})
	iso, err := tb.AddIsolated()
	require.NoError(t, err)
	out, err := exec.Command("ip", "-n", iso.Name, "-6", "addr", "show").CombinedOutput()
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(out)), "no IPv6 address")
	out, err = exec.Command("ip", "-n", iso.Name, "route", "get", tb.Hosts[0].String()).CombinedOutput()
	assert.Error(t, err, "no route to the servers: %s", out)
	out, err = exec.Command("ip", "-n", iso.Name, "route", "get", iso.Gateway.String()).CombinedOutput()
	assert.NoError(t, err, "a route to the gateway: %s", out)
}
