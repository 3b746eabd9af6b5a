package intents_test

// Privileged integration tests: a client namespace with two paths (veth
// pairs p1 and p2) to a server namespace that has a DNS server per path,
// each giving a different answer for www.test, and an echo server that tells
// the client which addresses it saw. The client side of every scenario runs
// as a child test process inside the client namespace (testbed.RunTest), so
// every socket the library opens is the namespace's; the parent checks what
// the servers saw.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/ipv4"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

const (
	webAddr1 = "10.71.100.1" // what path 1's DNS says www.test is
	webAddr2 = "10.71.100.2" // what path 2's DNS says
	echoPort = "8080"
)

type twoPaths struct {
	tb   *testbed.Testbed
	dns  []*testbed.DNSServer
	echo *echoServer
	udp  *echoServer // on UDP port echoPort
	web  *testbed.WebServer
}

// setupTwoPaths starts a testbed of two veth paths (p1, p2) and two server
// hosts; path i's DNS server says www.test is host i.
func setupTwoPaths(t *testing.T) *twoPaths {
	tp := &twoPaths{tb: testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{{Veth: true}, {Veth: true}}, Servers: 2})}
	var err error
	tp.dns, err = tp.tb.StartDNS()
	require.NoError(t, err)
	tp.web, err = tp.tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	// stall.test sends its headers and a first chunk, then nothing until
	// the client goes away or the test ends (?whole: ten bytes, whole).
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tp.web.Handle("stall.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("whole") {
			w.Write(make([]byte, 10))
			return
		}
		w.Header().Set("Content-Length", "100000")
		w.Write(make([]byte, 1000))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	for _, d := range tp.dns {
		d.Set("stall.test", tp.tb.Hosts[0])
	}
	require.NoError(t, tp.tb.Server.Do(func() error {
		var err error
		if tp.echo, err = startEcho(t, ":"+echoPort); err != nil {
			return err
		}
		tp.udp, err = startUDPEcho(t, ":"+echoPort)
		return err
	}))
	return tp
}

// run runs a scenario in the client namespace, then brings both links back
// up, as a child may have taken one down.
func (tp *twoPaths) run(t *testing.T, scenario string) {
	testbed.RunTest(t, tp.tb.Client, "TestNetnsTwoPathsChild", scenario)
	for _, p := range tp.tb.Paths {
		require.NoError(t, tp.tb.SetLinkUp(p, true))
	}
}

func (tp *twoPaths) queries() (int64, int64) { return tp.dns[0].Queries(), tp.dns[1].Queries() }

func TestNetnsTwoPaths(t *testing.T) {
	tp := setupTwoPaths(t)

	t.Run("prefer path 2: its DNS, its address", func(t *testing.T) {
		d1, d2 := tp.queries()
		n := tp.echo.accepted()
		tp.run(t, "prefer2")
		assert.Zero(t, tp.dns[0].Queries()-d1, "path 1's DNS server was never asked")
		assert.Positive(t, tp.dns[1].Queries()-d2)
		assert.Equal(t, []string{"10.71.2.1 -> " + webAddr2}, tp.echo.since(n), "the server saw path 2")
	})
	t.Run("prefer path 1: its DNS, its address", func(t *testing.T) {
		d1, d2 := tp.queries()
		n := tp.echo.accepted()
		tp.run(t, "prefer1")
		assert.Positive(t, tp.dns[0].Queries()-d1)
		assert.Zero(t, tp.dns[1].Queries()-d2, "path 2's DNS server was never asked")
		assert.Equal(t, []string{"10.71.1.1 -> " + webAddr1}, tp.echo.since(n), "the server saw path 1")
	})
	t.Run("a prohibited path is not used even when it is the only one up", func(t *testing.T) {
		d1, d2 := tp.queries()
		n := tp.echo.accepted()
		tp.run(t, "prohibit")
		assert.Zero(t, tp.dns[0].Queries()-d1)
		assert.Zero(t, tp.dns[1].Queries()-d2)
		assert.Empty(t, tp.echo.since(n), "nothing reached the server")
	})
	t.Run("zero Dialer is net.Dialer", func(t *testing.T) {
		n := tp.echo.accepted()
		tp.run(t, "zero")
		assert.Equal(t, []string{"10.71.1.1 -> " + webAddr1, "10.71.1.1 -> " + webAddr1}, tp.echo.since(n),
			"both went the routing table's way")
	})
	t.Run("path 1 down: the next dial uses path 2", func(t *testing.T) {
		n := tp.echo.accepted()
		tp.run(t, "failover")
		assert.Equal(t, []string{
			"10.71.1.1 -> " + webAddr1, // before
			"10.71.2.1 -> " + webAddr2, // after the table saw the link go down
			"10.71.2.1 -> " + webAddr2, // a manager that does not watch: path 1 fails, path 2 serves
		}, tp.echo.since(n))
	})
	t.Run("discovery and watching", func(t *testing.T) {
		tp.run(t, "discover")
	})
	t.Run("Transport: a path per request, connections pooled per path", func(t *testing.T) {
		n := len(tp.web.Requests())
		tp.run(t, "transport")
		var got []string
		for _, r := range tp.web.Requests()[n:] {
			got = append(got, fmt.Sprintf("%s %s from %s", r.Host, r.URI, r.Remote.Addr()))
		}
		// The server logs a request when its handler returns, which for a
		// large body may be after the next request: compare as a set.
		assert.ElementsMatch(t, []string{
			"host1.test /obj?size=100 from 10.71.1.1",     // query: path 1
			"host1.test /obj?size=1000000 from 10.71.2.1", // bulk: path 2
			"host1.test /obj?size=200 from 10.71.1.1",     // query again, path 1's connection
			"host1.test /obj?size=2000000 from 10.71.2.1", // bulk again, path 2's connection
		}, got)
		conns := tp.web.Conns()
		var remotes []string
		for _, c := range conns {
			if c.Requests > 0 && c.Local.Addr() == tp.tb.Hosts[0] {
				remotes = append(remotes, fmt.Sprintf("%s %d", c.Remote.Addr(), c.Requests))
			}
		}
		assert.Contains(t, remotes, "10.71.1.1 2")
		assert.Contains(t, remotes, "10.71.2.1 2")
	})
	t.Run("Transport: path down mid-request", func(t *testing.T) {
		n := len(tp.web.Requests())
		tp.run(t, "pathdown")
		var got []string
		for _, r := range tp.web.Requests()[n:] {
			got = append(got, fmt.Sprintf("%s from %s", r.Host, r.Remote.Addr()))
		}
		assert.Contains(t, got, "stall.test from 10.71.2.1", "the next request went over path 2")
	})
	t.Run("Transport: the other path warmed by a spare connection", func(t *testing.T) {
		// measure.test answers once the server has seen a connection from
		// path 2: the child's first request ends after the spare's
		// handshake did. The child's second request, sent over path 2,
		// takes the spare.
		fromP2 := make(chan struct{})
		var once sync.Once
		tp.web.OnConn(func(c testbed.ConnLog) {
			if c.Remote.Addr().String() == "10.71.2.1" {
				once.Do(func() { close(fromP2) })
			}
		})
		tp.web.Handle("measure.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-fromP2:
				io.WriteString(w, "measured")
			case <-r.Context().Done():
			}
		}))
		for _, d := range tp.dns {
			d.Set("measure.test", tp.tb.Hosts[0])
		}
		n := len(tp.web.Conns())
		tp.run(t, "measure")
		var onP2 []int
		for _, c := range tp.web.Conns()[n:] {
			if c.Remote.Addr().String() == "10.71.2.1" {
				onP2 = append(onP2, c.Requests)
			}
		}
		assert.Equal(t, []int{1}, onP2, "one connection from path 2, opened before any request went there, then carrying one")
		n = len(tp.web.Conns())
		tp.run(t, "measure-prohibited")
		for _, c := range tp.web.Conns()[n:] {
			assert.NotEqual(t, "10.71.2.1", c.Remote.Addr().String(), "nothing from the prohibited path")
		}
	})
	t.Run("UDP: a dial and a packet socket on the chosen path, prohibitions held", func(t *testing.T) {
		n := tp.udp.accepted()
		tp.run(t, "udp")
		assert.Equal(t, []string{"10.71.2.1 -> " + webAddr2, "10.71.2.1 -> " + webAddr1}, tp.udp.since(n),
			"the dial and the packet socket both on path 2, nothing after the prohibition")
	})
	t.Run("LookupEndpoints", func(t *testing.T) {
		n := tp.echo.accepted()
		tp.run(t, "endpoints")
		assert.Equal(t, []string{"10.71.2.1 -> " + webAddr2}, tp.echo.since(n))
	})
	t.Run("a path's DNS queries leave through that path", func(t *testing.T) {
		// A name server on a server host, reachable over both paths; the
		// client's routes take path 1 to it unless a socket is bound.
		shared, err := tp.tb.StartDNSAt(netip.MustParseAddr(sharedDNS))
		require.NoError(t, err)
		tp.run(t, "dns-through-path")
		from := shared.QueriesFrom()
		assert.Positive(t, from[tp.tb.Paths[1].ClientAddr], "queries from path 2's address")
		assert.Len(t, from, 1, "and from no other: %v", from)
	})
}

// sharedDNS is the name server of the "dns-through-path" scenario, on
// server host 2.
const sharedDNS = "10.71.100.2"

// TestNetnsTwoPathsChild is the client half of TestNetnsTwoPaths; it runs only in
// the child process that test starts inside the client namespace.
func TestNetnsTwoPathsChild(t *testing.T) {
	scenario := testbed.ChildArg(t, "TestNetnsTwoPaths")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	explicit := func(t *testing.T, watch bool) *intents.Manager {
		m, err := intents.NewManager(intents.Config{
			Paths: []intents.PathConfig{
				{Interface: "p1", DNS: []string{"10.71.1.2"}},
				{Interface: "p2", DNS: []string{"10.71.2.2"}},
			},
			Policy:  &policy.ByCategory{},
			NoWatch: !watch,
		})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		return m
	}
	prefer := func(name string) context.Context {
		return intents.WithIntents(ctx, intents.Intents{Interfaces: map[string]intents.Level{name: intents.LevelPrefer}})
	}

	switch scenario {
	case "prefer1", "prefer2":
		path, web := "p1", webAddr1
		if scenario == "prefer2" {
			path, web = "p2", webAddr2
		}
		d := intents.Dialer{Manager: explicit(t, false)}
		conn, err := d.DialContext(prefer(path), "tcp", "www.test:"+echoPort)
		require.NoError(t, err)
		defer conn.Close()
		p, binding := intents.PathOf(conn)
		require.NotNil(t, p)
		assert.Equal(t, path, p.Name)
		assert.Equal(t, intents.BindInterface, binding)
		local := netip.MustParseAddrPort(conn.LocalAddr().String()).Addr()
		assert.Equal(t, p.Addrs[0], local)
		assert.Equal(t, fmt.Sprintf("%s -> %s", local, web), readEcho(t, conn))

	case "prohibit":
		m := explicit(t, true)
		setLink(t, m, "p2", false)
		d := intents.Dialer{Manager: m}
		ctx := intents.WithIntents(ctx, intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelProhibit}})
		_, err := d.DialContext(ctx, "tcp", "www.test:"+echoPort)
		var npe *intents.NoPathError
		require.ErrorAs(t, err, &npe)
		var oe *net.OpError
		assert.ErrorAs(t, err, &oe, "errors are *net.OpError")
		assert.ErrorIs(t, err, intents.ErrNoPath)
		assert.Equal(t, []intents.Exclusion{{Path: "p1", Reason: "prohibited (prohibit=p1)"}, {Path: "p2", Reason: "down"}}, npe.Excluded)
		_, err = d.DialContext(ctx, "tcp", webAddr1+":"+echoPort)
		assert.ErrorIs(t, err, intents.ErrNoPath, "literal addresses too")

	case "zero":
		var zero intents.Dialer
		var plain net.Dialer
		a, err := zero.DialContext(ctx, "tcp", webAddr1+":"+echoPort)
		require.NoError(t, err)
		defer a.Close()
		b, err := plain.DialContext(ctx, "tcp", webAddr1+":"+echoPort)
		require.NoError(t, err)
		defer b.Close()
		assert.IsType(t, &net.TCPConn{}, a, "the zero Dialer returns what net.Dialer does")
		p, binding := intents.PathOf(a)
		assert.Nil(t, p)
		assert.Equal(t, intents.BindNone, binding)
		assert.Equal(t, readEcho(t, b), readEcho(t, a))

	case "failover":
		m := explicit(t, true)
		d := intents.Dialer{Manager: m}
		ctx := prefer("p1")
		dialVia := func(d *intents.Dialer, want string) {
			t.Helper()
			conn, err := d.DialContext(ctx, "tcp", "www.test:"+echoPort)
			require.NoError(t, err)
			defer conn.Close()
			p, _ := intents.PathOf(conn)
			assert.Equal(t, want, p.Name)
			readEcho(t, conn)
		}
		stale := &intents.Dialer{Manager: explicit(t, false)}
		dialVia(&d, "p1")
		setLink(t, m, "p1", false)
		dialVia(&d, "p2")
		assert.True(t, stale.Manager.Path("p1").Up, "a manager that does not watch still thinks p1 is up")
		dialVia(stale, "p2")

	case "discover":
		dir := t.TempDir()
		resolvConf := filepath.Join(dir, "resolv.conf")
		require.NoError(t, os.WriteFile(resolvConf, []byte("nameserver 10.71.1.2\nsearch corp.test\n"), 0o644))
		m, err := intents.NewManager(intents.Config{ResolvConf: resolvConf})
		require.NoError(t, err)
		defer m.Close()
		var got []string
		for _, p := range m.Paths() {
			got = append(got, fmt.Sprintf("%s %s up=%v %v dns=%v %s search=%v", p.Name, p.Type, p.Up, p.Addrs, p.DNS, p.DNSSource, p.Search))
		}
		assert.Equal(t, []string{
			"lo loopback up=true [127.0.0.1 ::1] dns=[10.71.1.2:53] resolv.conf search=[corp.test]",
			"p1 other up=true [10.71.1.1] dns=[10.71.1.2:53] resolv.conf search=[corp.test]",
			"p2 other up=true [10.71.2.1] dns=[10.71.1.2:53] resolv.conf search=[corp.test]",
		}, got)

		changed := m.Changed()
		require.NoError(t, sh("ip", "addr", "add", "10.71.1.77/24", "dev", "p1"))
		waitFor(t, m, changed, func() bool {
			return len(m.Path("p1").Addrs) == 2
		})
		assert.Equal(t, "10.71.1.77", m.Path("p1").Addrs[1].String())

	case "transport":
		// The veth paths are alike, so measurements would not tell them
		// apart: the categories' paths are configured.
		log := make(intents.DebugLog, 256)
		m, err := intents.NewManager(intents.Config{
			Paths: []intents.PathConfig{
				{Interface: "p1", DNS: []string{"10.71.1.2"}},
				{Interface: "p2", DNS: []string{"10.71.2.2"}},
			},
			Policy: &policy.ByCategory{Paths: map[intents.Category]string{
				intents.CategoryQuery: "p1", intents.CategoryBulk: "p2"}},
			NoWatch: true,
			Logger:  slog.New(log),
		})
		require.NoError(t, err)
		tr := &intents.Transport{Manager: m}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		fetch := func(cat intents.Category, size int) {
			ctx := intents.WithIntents(ctx, intents.Intents{Category: cat, SizeToBeReceived: int64(size)})
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://host1.test/obj?size=%d", size), nil)
			resp, err := client.Do(req)
			require.NoError(t, err)
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			assert.EqualValues(t, size, n)
		}
		fetch(intents.CategoryQuery, 100)
		// The spare on p2 is dialed beside the first connection; a bulk
		// request sent while it still dials would open another.
		log.Await(t, "intents: spare connection opened")
		fetch(intents.CategoryBulk, 1000000)
		fetch(intents.CategoryQuery, 200)
		fetch(intents.CategoryBulk, 2000000)
		st := tr.Stats()
		assert.EqualValues(t, 1, st["p1"].Dials)
		assert.EqualValues(t, 1, st["p1"].Reuses)
		assert.EqualValues(t, 1, st["p2"].Dials, "the spare opened beside the first connection")
		assert.EqualValues(t, 2, st["p2"].Reuses, "which both bulk requests took")
		assert.EqualValues(t, 3000000, st["p2"].BytesReceived)
		assert.Equal(t, 1, st["p1"].Idle, "each path keeps its connection")
		assert.Equal(t, 1, st["p2"].Idle)

	case "pathdown":
		// A body that cannot move (no validator) stays on its connection
		// when its path goes down, out of the pool: the next request goes
		// over path 2 at once, even with one connection per host, and the
		// body ends as its caller's deadline ends it, saying why.
		m := explicit(t, true)
		tr := &intents.Transport{Manager: m, MaxConnsPerHost: 1}
		defer tr.CloseIdleConnections()
		ctx := prefer("p1")
		bodyCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(bodyCtx, "GET", "http://stall.test/", nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, err = io.ReadFull(resp.Body, make([]byte, 1000))
		require.NoError(t, err)
		setLink(t, m, "p1", false)

		req, _ = http.NewRequestWithContext(ctx, "GET", "http://stall.test/?whole", nil)
		resp2, err := tr.RoundTrip(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp2.Body)
		resp2.Body.Close()
		assert.EqualValues(t, 1, tr.Stats()["p2"].Requests, "the host's place not held by the body that stayed")

		_, err = io.Copy(io.Discard, resp.Body)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline ends it, not the path")
		require.ErrorIs(t, err, intents.ErrPathDown)
		var pde *intents.PathDownError
		require.ErrorAs(t, err, &pde)
		assert.Equal(t, "p1", pde.Path)
		assert.True(t, pde.Stayed)
		t.Log(err)

	case "udp":
		m := explicit(t, true)
		d := intents.Dialer{Manager: m}
		conn, err := d.DialContext(prefer("p2"), "udp", "www.test:"+echoPort)
		require.NoError(t, err)
		defer conn.Close()
		p, _ := intents.PathOf(conn)
		require.NotNil(t, p)
		assert.Equal(t, "p2", p.Name)
		require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = conn.Write([]byte("hello"))
		require.NoError(t, err)
		buf := make([]byte, 100)
		n, err := conn.Read(buf)
		require.NoError(t, err)
		assert.Equal(t, "10.71.2.1 -> "+webAddr2, string(buf[:n]))

		pc, err := d.ListenPacket(prefer("p2"), "udp", ":0")
		require.NoError(t, err)
		defer pc.Close()
		on, ok := pc.(*intents.PacketConn)
		require.True(t, ok, "%T", pc)
		assert.Equal(t, "p2", on.Path().Name)
		assert.Equal(t, intents.BindInterface, on.Binding())
		assert.Equal(t, "10.71.2.1", netip.MustParseAddrPort(pc.LocalAddr().String()).Addr().String())
		require.NoError(t, pc.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = pc.WriteTo([]byte("hello"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(webAddr1+":"+echoPort)))
		require.NoError(t, err)
		n, _, err = pc.ReadFrom(buf)
		require.NoError(t, err)
		assert.Equal(t, "10.71.2.1 -> "+webAddr1, string(buf[:n]), "path 2, whatever the routing table says of host 1")

		setLink(t, m, "p2", false)
		noP1 := intents.WithIntents(ctx, intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelProhibit}})
		_, err = d.ListenPacket(noP1, "udp", ":0")
		assert.ErrorIs(t, err, intents.ErrNoPath, "p1 prohibited, p2 down")
		_, err = d.DialContext(noP1, "udp", webAddr1+":"+echoPort)
		assert.ErrorIs(t, err, intents.ErrNoPath)

	case "dns-through-path":
		m, err := intents.NewManager(intents.Config{
			Paths:   []intents.PathConfig{{Interface: "p1", DNS: []string{"10.71.1.2"}}, {Interface: "p2", DNS: []string{sharedDNS}}},
			NoWatch: true,
		})
		require.NoError(t, err)
		defer m.Close()
		p2 := m.Path("p2")
		require.NotNil(t, p2)
		addrs, err := m.Resolver().LookupPath(ctx, p2, "ip4", "www.test")
		require.NoError(t, err)
		assert.Equal(t, []netip.Addr{netip.MustParseAddr(webAddr1)}, addrs, "the shared server's answer")

	case "endpoints":
		r := explicit(t, false).Resolver()
		eps, err := r.LookupEndpoints(prefer("p2"), "tcp", "www.test", "http-alt")
		require.NoError(t, err)
		require.Len(t, eps, 2, "one per path: path 2's answer, then path 1's")
		assert.Equal(t, webAddr2+":8080", eps[0].Remote.String())
		assert.Equal(t, "10.71.2.1", eps[0].Local.String())
		assert.Equal(t, "p2", eps[0].Path.Name)
		assert.Equal(t, webAddr1+":8080", eps[1].Remote.String())
		assert.Equal(t, "p1", eps[1].Path.Name)
		conn, err := eps[0].Dialer(nil).DialContext(ctx, "tcp", eps[0].Remote.String())
		require.NoError(t, err)
		defer conn.Close()
		readEcho(t, conn)

	case "measure", "measure-prohibited":
		log := make(intents.DebugLog, 64)
		m, err := intents.NewManager(intents.Config{
			Paths:  []intents.PathConfig{{Interface: "p1", DNS: []string{"10.71.1.2"}}, {Interface: "p2", DNS: []string{"10.71.2.2"}}},
			Policy: &policy.EAF{},
			Logger: slog.New(log),
		})
		require.NoError(t, err)
		defer m.Close()
		// The parent has just brought the links back up: the kernel may
		// tell that they run a moment later.
		waitFor(t, m, m.Changed(), func() bool { return m.Path("p1").Up && m.Path("p2").Up })
		require.False(t, m.Path("p2").Estimate().Measured, "nothing known of path 2 yet")
		// A first request raced would measure path 2 itself.
		tr := &intents.Transport{Manager: m, DisableFirstRace: true}
		defer tr.Close()
		var in intents.Intents
		url := "http://measure.test/"
		if scenario == "measure-prohibited" {
			in.Interfaces = map[string]intents.Level{"p2": intents.LevelProhibit}
			url = "http://host1.test/obj?size=100"
		}
		get := func(in intents.Intents) (reused bool) {
			t.Helper()
			ctx := httptrace.WithClientTrace(intents.WithIntents(ctx, in), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return reused
		}
		assert.False(t, get(in), "the first request opens a connection")
		if scenario == "measure-prohibited" {
			require.NoError(t, tr.Close()) // waits for any measurement
			assert.False(t, m.Path("p2").Estimate().Measured, "a prohibited path is not measured")
			assert.Zero(t, tr.Stats()["p2"].Dials, "nor warmed")
			return
		}
		log.Await(t, "intents: spare connection opened")
		e := m.Path("p2").Estimate()
		assert.True(t, e.Measured, "the other path's RTT was measured by the spare's handshake")
		assert.Positive(t, e.RTT)
		assert.Zero(t, tr.Stats()["p2"].Requests, "no request went over path 2 yet")
		assert.True(t, get(intents.Intents{Interfaces: map[string]intents.Level{"p2": intents.LevelRequire}}),
			"a request sent over path 2 takes the spare")
		st := tr.Stats()["p2"]
		assert.Equal(t, int64(1), st.Dials, "one connection on path 2: the spare")
		assert.Equal(t, int64(1), st.Requests)

	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
}

// setLink sets dev up or down and waits until m's table says so.
func setLink(t *testing.T, m *intents.Manager, dev string, up bool) {
	t.Helper()
	changed := m.Changed()
	state := map[bool]string{true: "up", false: "down"}[up]
	require.NoError(t, sh("ip", "link", "set", dev, state))
	waitFor(t, m, changed, func() bool { return m.Path(dev).Up == up })
}

// waitFor waits on m's change notifications (from changed on) until cond.
func waitFor(t *testing.T, m *intents.Manager, changed <-chan struct{}, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-changed:
			changed = m.Changed()
		case <-timeout:
			t.Fatal("the path table did not change")
		}
	}
}

func sh(name string, args ...string) error {
	out, err := osexec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
	}
	return nil
}

func readEcho(t *testing.T, conn net.Conn) string {
	t.Helper()
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

// echoServer writes "REMOTE-IP -> LOCAL-IP\n" to each connection and logs it.
type echoServer struct {
	mu  sync.Mutex
	log []string
}

func (e *echoServer) accepted() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.log)
}

func (e *echoServer) since(n int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log[n:]...)
}

// startUDPEcho answers each datagram with "REMOTE-IP -> LOCAL-IP" and logs
// it; it listens on each of the server's addresses to know the local one.
func startUDPEcho(t *testing.T, addr string) (*echoServer, error) {
	e := &echoServer{}
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, err
	}
	// IP_PKTINFO tells which of the namespace's addresses a datagram was for.
	p4 := ipv4.NewPacketConn(pc)
	if err := p4.SetControlMessage(ipv4.FlagDst, true); err != nil {
		pc.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			_, cm, from, err := p4.ReadFrom(buf)
			if err != nil {
				return
			}
			remote := netip.MustParseAddrPort(from.String()).Addr()
			line := fmt.Sprintf("%s -> %s", remote, cm.Dst)
			e.mu.Lock()
			e.log = append(e.log, line)
			e.mu.Unlock()
			_, _ = p4.WriteTo([]byte(line), &ipv4.ControlMessage{Src: cm.Dst}, from)
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return e, nil
}

func startEcho(t *testing.T, addr string) (*echoServer, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	e := &echoServer{}
	testbed.Serve(t, l, func(c net.Conn) {
		remote := netip.MustParseAddrPort(c.RemoteAddr().String()).Addr()
		local := netip.MustParseAddrPort(c.LocalAddr().String()).Addr()
		line := fmt.Sprintf("%s -> %s", remote, local)
		e.mu.Lock()
		e.log = append(e.log, line)
		e.mu.Unlock()
		_, _ = fmt.Fprintln(c, line)
	})
	return e, nil
}
