package h3_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/h3"
	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsHTTP3 runs HTTP/3 on the two-path testbed, against quic-go's
// HTTP/3 server in the server namespace (with HTTP/1.1 and HTTP/2 over
// TCP beside it, advertising h3 with Alt-Svc): the path of every request
// as the server saw it, prohibition, Alt-Svc discovery, and the fallback
// to TCP on a path that drops UDP.
func TestNetnsHTTP3(t *testing.T) {
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{
		testbed.Symmetric(20*time.Millisecond, 20e6), testbed.Symmetric(40*time.Millisecond, 20e6)}})
	web, err := tb.StartWeb(testbed.WebOptions{HTTP3: true, AdvertiseHTTP3: true})
	require.NoError(t, err)
	pem, err := web.CA.WritePEM(t.TempDir())
	require.NoError(t, err)
	seen := func(from int) []string {
		var out []string
		for _, r := range web.Requests()[from:] {
			out = append(out, r.Proto+" "+r.Remote.Addr().String())
		}
		return out
	}

	t.Run("paths", func(t *testing.T) {
		n := len(web.Requests())
		testbed.RunTest(t, tb.Client, "TestNetnsHTTP3Child", "paths "+pem)
		assert.Equal(t, []string{"HTTP/3.0 10.71.1.1", "HTTP/3.0 10.71.2.1", "HTTP/3.0 10.71.2.1", "HTTP/3.0 10.71.1.1"}, seen(n),
			"prefer p1, prefer p2, prohibit p1 (not the connection on p1), prohibit p2")
	})
	t.Run("altsvc", func(t *testing.T) {
		n := len(web.Requests())
		testbed.RunTest(t, tb.Client, "TestNetnsHTTP3Child", "altsvc "+pem)
		assert.Equal(t, []string{"HTTP/2.0 10.71.1.1", "HTTP/3.0 10.71.1.1"}, seen(n))
	})
	t.Run("udp-blocked", func(t *testing.T) {
		for _, d := range []*testbed.Direction{tb.Paths[0].Up, tb.Paths[0].Down} {
			p := d.Params()
			p.DropUDP = true
			d.Set(p)
		}
		lost := tb.Paths[0].Up.Stats().Losses
		n := len(web.Requests())
		testbed.RunTest(t, tb.Client, "TestNetnsHTTP3Child", "blocked "+pem)
		assert.Equal(t, []string{"HTTP/2.0 10.71.1.1", "HTTP/2.0 10.71.1.1", "HTTP/3.0 10.71.2.1"}, seen(n),
			"path 1: TCP, twice; path 2 still HTTP/3")
		assert.Positive(t, tb.Paths[0].Up.Stats().Losses-lost, "HTTP/3 was tried on path 1, and its datagrams dropped")
	})
}

func TestNetnsHTTP3Child(t *testing.T) {
	scenario, pem, _ := strings.Cut(testbed.ChildArg(t, "TestNetnsHTTP3"), " ")
	roots, err := testbed.ReadPool(pem)
	require.NoError(t, err)
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	tr := &intents.Transport{Manager: m, HTTP3: &h3.Dialer{},
		Base: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	defer tr.Close()
	const url = "https://10.71.100.1/obj/1000"
	with := func(name string, l intents.Level) context.Context {
		return intents.WithIntents(context.Background(), intents.Intents{Interfaces: map[string]intents.Level{name: l}})
	}
	// fetch gets url and returns its protocol and the local address its
	// connection had.
	fetch := func(ctx context.Context) (int, netip.Addr) {
		var local netip.Addr
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			local = netip.MustParseAddrPort(info.Conn.LocalAddr().String()).Addr()
		}})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		assert.EqualValues(t, 1000, n)
		return resp.ProtoMajor, local
	}
	p1, p2 := netip.MustParseAddr("10.71.1.1"), netip.MustParseAddr("10.71.2.1")
	switch scenario {
	case "paths":
		tr.HTTP3Always = true
		for _, c := range []struct {
			ctx  context.Context
			want netip.Addr
		}{{with("p1", intents.LevelPrefer), p1}, {with("p2", intents.LevelPrefer), p2},
			{with("p1", intents.LevelProhibit), p2}, {with("p2", intents.LevelProhibit), p1}} {
			proto, local := fetch(c.ctx)
			assert.Equal(t, 3, proto)
			assert.Equal(t, c.want, local)
		}
	case "altsvc":
		proto, _ := fetch(with("p1", intents.LevelPrefer))
		assert.Equal(t, 2, proto, "nothing advertised yet")
		tr.CloseIdleConnections()
		proto, _ = fetch(with("p1", intents.LevelPrefer))
		assert.Equal(t, 3, proto, "advertised by the first response")
	case "blocked":
		tr.HTTP3Always = true
		start := time.Now()
		proto, local := fetch(with("p1", intents.LevelPrefer))
		t.Logf("path 1 drops UDP: the first response came over TCP after %v (race delay %v)", time.Since(start), intents.DefaultHTTP3RaceDelay)
		assert.Equal(t, 2, proto)
		assert.Equal(t, p1, local)
		tr.CloseIdleConnections()
		start = time.Now()
		proto, _ = fetch(with("p1", intents.LevelPrefer))
		t.Logf("the next, with HTTP/3 marked broken there: %v", time.Since(start))
		assert.Equal(t, 2, proto)
		// Path 2 carries UDP: HTTP/3 there, even for the same origin.
		proto, local = fetch(with("p2", intents.LevelRequire))
		assert.Equal(t, 3, proto)
		assert.Equal(t, p2, local)
	}
}

// TestNetnsHTTP3Migration takes path 1's link down in the middle of a
// 4 MB GET and, on a fresh testbed, of a 4 MB POST over HTTP/3: the QUIC
// connection migrates to path 2 with its stream, and both complete byte
// for byte. The child reports the stall the cut made.
func TestNetnsHTTP3Migration(t *testing.T) {
	testbed.SkipIfShort(t, "6 s")
	testbed.RequireRoot(t)
	for _, scenario := range []string{"get", "post", "prohibited"} {
		t.Run(scenario, func(t *testing.T) {
			tb := testbed.New(t, testbed.Spec{Servers: 2, Paths: []testbed.PathSpec{
				testbed.Symmetric(20*time.Millisecond, 20e6), testbed.Symmetric(40*time.Millisecond, 20e6)}})
			web, err := tb.StartWeb(testbed.WebOptions{HTTP3: true})
			require.NoError(t, err)
			web.Handle(tb.Hosts[1].String(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h := sha256.New()
				if _, err := io.Copy(h, r.Body); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				fmt.Fprintf(w, "%x", h.Sum(nil))
			}))
			pem, err := web.CA.WritePEM(t.TempDir())
			require.NoError(t, err)
			testbed.RunTest(t, tb.Client, "TestNetnsHTTP3MigrationChild", scenario+" "+pem)
			if scenario == "prohibited" {
				return // the response was cut off: the server may still be writing
			}
			var served []string
			for _, c := range web.Conns() {
				if c.Requests > 0 { // not the bare handshakes that measure a path's RTT
					served = append(served, c.Proto+" from "+c.Remote.Addr().String())
				}
			}
			assert.Equal(t, []string{"HTTP/3.0 from 10.71.1.1"}, served, "one QUIC connection, migrated, not a second one")
		})
	}
}

func TestNetnsHTTP3MigrationChild(t *testing.T) {
	scenario, pem, _ := strings.Cut(testbed.ChildArg(t, "TestNetnsHTTP3Migration"), " ")
	roots, err := testbed.ReadPool(pem)
	require.NoError(t, err)
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}})
	require.NoError(t, err)
	defer m.Close()
	tr := &intents.Transport{Manager: m, HTTP3: &h3.Dialer{}, HTTP3Always: true,
		Base: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer tr.Close()
	levels := map[string]intents.Level{"p1": intents.LevelPrefer}
	if scenario == "prohibited" {
		levels["p2"] = intents.LevelProhibit
	}
	ctx := intents.WithIntents(context.Background(), intents.Intents{Interfaces: levels})
	var local []netip.Addr
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		local = append(local, netip.MustParseAddrPort(info.Conn.LocalAddr().String()).Addr())
	}})
	var cutAt time.Time
	var rx2, tx2 int64 // path 2's interface counters at the cut
	cut := func() {
		rx2, tx2 = ifaceBytes(t, "p2", "rx"), ifaceBytes(t, "p2", "tx")
		cutAt = time.Now()
		out, err := exec.Command("ip", "link", "set", "p1", "down").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	// resumed is how long after the cut path 2 had carried 4 KiB more in
	// direction dir (more than its probes): set at the first call after.
	var resumed time.Duration
	checkResumed := func(dir string, at int64) {
		if !cutAt.IsZero() && resumed == 0 && ifaceBytes(t, "p2", dir)-at >= 4<<10 {
			resumed = time.Since(cutAt)
		}
	}
	const size = 4_000_000
	switch scenario {
	case "prohibited":
		// The request may not use path 2: the connection does not move
		// there, and the body ends with the path.
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://10.71.100.1/obj/%d", size), nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, err = io.ReadAll(&cutAfter{r: resp.Body, at: size / 4, cut: cut})
		assert.ErrorIs(t, err, intents.ErrPathDown)
		assert.Zero(t, tr.Stats()["p2"].Migrated)
		return
	case "get":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://10.71.100.1/obj/%d", size), nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 3, resp.ProtoMajor)
		h := sha256.New()
		buf := make([]byte, 16<<10)
		var n int64
		for {
			k, err := resp.Body.Read(buf)
			if k > 0 {
				h.Write(buf[:k])
				n += int64(k)
				checkResumed("rx", rx2)
				if cutAt.IsZero() && n >= size/4 {
					cut()
				}
			}
			if err == io.EOF {
				break
			}
			require.NoError(t, err, "after %d bytes", n)
		}
		assert.EqualValues(t, size, n)
		assert.Equal(t, testbed.ObjectSum(size), [32]byte(h.Sum(nil)), "byte for byte")
		t.Logf("GET: path 1 down after %d of %d bytes read: the body read on with 4 KiB more received on path 2 %v after the cut; done %v after it",
			size/4, size, resumed.Round(time.Millisecond), time.Since(cutAt).Round(time.Millisecond))
	case "post":
		body := &cutAfter{r: testbed.NewObject(size), at: size / 4, cut: cut, after: func() { checkResumed("tx", tx2) }}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://10.71.100.2/sum", body)
		require.NoError(t, err)
		req.ContentLength = size
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 3, resp.ProtoMajor)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		want := testbed.ObjectSum(size)
		assert.Equal(t, hex.EncodeToString(want[:]), string(got), "the server got the body byte for byte")
		t.Logf("POST: path 1 down after %d of %d bytes were handed to the connection: it took more with 4 KiB more sent on path 2 %v after the cut; the response %v after it",
			size/4, size, resumed.Round(time.Millisecond), time.Since(cutAt).Round(time.Millisecond))
	}
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.71.1.1")}, local, "one connection, opened on path 1")
	stats := tr.Stats()
	assert.EqualValues(t, 1, stats["p2"].Migrated, "the connection moved to path 2")
	assert.Equal(t, 1, stats["p2"].Idle, "and stays there")
}

// cutAfter reads r and calls cut once at bytes have been read, and after
// (if set) on every read.
type cutAfter struct {
	r          io.Reader
	n          int64
	at         int64
	cut, after func()
}

func (c *cutAfter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	if c.after != nil {
		c.after()
	}
	if c.cut != nil && c.n >= c.at {
		c.cut()
		c.cut = nil
	}
	return k, err
}

// ifaceBytes reads an interface's byte counter, dir "rx" or "tx".
func ifaceBytes(t *testing.T, dev, dir string) int64 {
	b, err := os.ReadFile("/sys/class/net/" + dev + "/statistics/" + dir + "_bytes")
	require.NoError(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return n
}
