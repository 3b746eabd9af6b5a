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
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/h3"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
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
	// HTTP/3 or nothing where the scenario wants HTTP/3: a handshake slowed
	// by a busy machine must not lose a race to TCP and fail the test.
	tr.HTTP3RaceDelay = -1
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
		tr.HTTP3Always, tr.HTTP3RaceDelay = true, 0 // the race is what is tested
		start := time.Now()
		proto, local := fetch(with("p1", intents.LevelPrefer))
		t.Logf("path 1 drops UDP: the first response came over TCP after %v", time.Since(start))
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

// TestNetnsHTTP3Migration cuts path 1 in the middle of a 4 MB GET and,
// on a fresh testbed, of a 4 MB POST over HTTP/3, once path 1 has carried
// 1 MB of it: by a link event (the client's device down), or as a
// blackhole (the link stays up, every packet lost both ways). The QUIC
// connection moves to path 2 with its stream, and both complete byte for
// byte; where it cannot move (path 2 prohibited, or down too: twice), its
// stream cannot either, so it stays with the connection, and the body
// ends as QUIC's idle timeout (3 s here) ends that, with a PathDownError
// that names the path. It reports how long after the cut path 2 carried
// the transfer on (32 KiB more than before the cut).
func TestNetnsHTTP3Migration(t *testing.T) {
	testbed.SkipIfShort(t, "12 s")
	testbed.RequireRoot(t)
	for _, scenario := range []string{"get", "post", "prohibited", "twice", "get-blackhole", "post-blackhole"} {
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
			dir := t.TempDir()
			pem, err := web.CA.WritePEM(dir)
			require.NoError(t, err)
			// The cut, once path 1 carried 1 MB of the transfer: the
			// response's way for a GET, the request's for a POST.
			blackhole := strings.HasSuffix(scenario, "-blackhole")
			d := tb.Paths[0].Down
			if strings.HasPrefix(scenario, "post") {
				d = tb.Paths[0].Up
			}
			cut := make(chan time.Time, 1)
			d.OnBytes(d.Stats().Bytes+1_000_000, func() {
				at := time.Now()
				if blackhole {
					tb.Paths[0].SetDown(true)
				} else {
					assert.NoError(t, tb.SetLinkUp(tb.Paths[0], false))
				}
				if scenario == "twice" { // and path 2 once it carried 500 kB more
					d2 := tb.Paths[1].Down
					d2.OnBytes(d2.Stats().Bytes+500_000, func() { assert.NoError(t, tb.SetLinkUp(tb.Paths[1], false)) })
				}
				cut <- at
			})
			testbed.RunTest(t, tb.Client, "TestNetnsHTTP3MigrationChild", scenario+" "+pem)
			var cutAt time.Time
			select {
			case cutAt = <-cut:
			default:
				t.Fatal("path 1 never carried 1 MB of the transfer")
			}
			if scenario == "prohibited" || scenario == "twice" {
				return // the response was cut off: the server may still be writing
			}
			b, err := os.ReadFile(filepath.Join(dir, "resumed"))
			require.NoError(t, err, "the child saw path 2 carry the transfer on")
			ns, err := strconv.ParseInt(string(b), 10, 64)
			require.NoError(t, err)
			t.Logf("%s: path 2 carried the transfer on %v after the cut", scenario, time.Unix(0, ns).Sub(cutAt).Round(time.Millisecond))
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
	scenario, _ = strings.CutSuffix(scenario, "-blackhole")
	roots, err := testbed.ReadPool(pem)
	require.NoError(t, err)
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}})
	require.NoError(t, err)
	defer m.Close()
	dialer := &h3.Dialer{}
	if scenario == "prohibited" || scenario == "twice" {
		dialer.QUICConfig = &quic.Config{MaxIdleTimeout: 3 * time.Second}
	}
	tr := &intents.Transport{Manager: m, HTTP3: dialer, HTTP3Always: true, HTTP3RaceDelay: -1,
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
	// watch notes, at each read of the transfer, path 2's counter in
	// direction dir: its value half a megabyte in (before the cut, after
	// the connection probed path 2), and when it has grown by 32 KiB
	// since (the transfer going on there), written for the parent.
	const size = 4_000_000
	var base int64 = -1
	var resumed bool
	watch := func(dir string, done int64) {
		switch {
		case resumed || done < size/8:
		case base < 0:
			base = ifaceBytes(t, "p2", dir)
		case ifaceBytes(t, "p2", dir)-base >= 32<<10:
			resumed = true
			at := strconv.FormatInt(time.Now().UnixNano(), 10)
			require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(pem), "resumed"), []byte(at), 0o600))
		}
	}
	switch scenario {
	case "get", "prohibited", "twice":
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
			h.Write(buf[:k])
			n += int64(k)
			watch("rx", n)
			if err == io.EOF {
				break
			}
			if scenario == "prohibited" {
				// The request may not use path 2: the connection does
				// not move there, and the body ends with it.
				if err != nil {
					assert.ErrorIs(t, err, intents.ErrPathDown)
					var pd *intents.PathDownError
					if assert.ErrorAs(t, err, &pd) {
						assert.True(t, pd.Stayed, "left to QUIC, which ended it")
					}
					assert.Zero(t, tr.Stats()["p2"].Migrated)
					return
				}
				continue
			}
			if scenario == "twice" && err != nil {
				// Moved to path 2, which went down too: the body ends
				// with that path, as one that never moved would.
				assert.ErrorIs(t, err, intents.ErrPathDown)
				var pd *intents.PathDownError
				if assert.ErrorAs(t, err, &pd) {
					assert.Equal(t, "p2", pd.Path)
				}
				assert.EqualValues(t, 1, tr.Stats()["p2"].Migrated)
				return
			}
			require.NoError(t, err, "after %d bytes", n)
		}
		require.NotContains(t, []string{"prohibited", "twice"}, scenario, "the body ended although its path went down")
		assert.EqualValues(t, size, n)
		assert.Equal(t, testbed.ObjectSum(size), [32]byte(h.Sum(nil)), "byte for byte")
	case "post":
		body := &watchedReader{r: testbed.NewObject(size), watch: func(n int64) { watch("tx", n) }}
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
	}
	assert.True(t, resumed, "path 2 carried the transfer on")
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.71.1.1")}, local, "one connection, opened on path 1")
	stats := tr.Stats()
	assert.EqualValues(t, 1, stats["p2"].Migrated, "the connection moved to path 2")
	assert.Equal(t, 2, stats["p2"].Idle, "and stays there, beside the spare opened with it")
	assert.EqualValues(t, 1, stats["p2"].Dials, "the spare: the connection that moved was dialed on path 1")
}

// watchedReader reads r and tells watch how much it has read so far.
type watchedReader struct {
	r     io.Reader
	n     int64
	watch func(int64)
}

func (w *watchedReader) Read(p []byte) (int, error) {
	k, err := w.r.Read(p)
	w.n += int64(k)
	w.watch(w.n)
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

// TestNetnsHTTP3Move is TestNetnsMove over HTTP/3: a 2 MB GET, no size
// hint, a fresh Manager with EAF over a near slow path (10 ms, 2 Mbit/s)
// and a far fast one (60 ms, 50 Mbit/s). Placed on path 1 as an object of
// unknown size, its stream moves to path 2 (the connection on path 1
// stays), and the body arrives byte for byte.
func TestNetnsHTTP3Move(t *testing.T) {
	testbed.SkipIfShort(t, "5 s")
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{
		Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 2e6), testbed.Symmetric(60*time.Millisecond, 50e6)},
	})
	web, err := tb.StartWeb(testbed.WebOptions{HTTP3: true})
	require.NoError(t, err)
	pem, err := web.CA.WritePEM(t.TempDir())
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsHTTP3MoveChild", pem)
	var got []string
	for _, r := range web.Requests() {
		if r.URI == "/obj/2000000" {
			got = append(got, r.Proto+" "+r.Remote.Addr().String()+" "+r.Range)
			t.Logf("%s %s from %s, Range %q: %d bytes sent", r.Proto, r.URI, r.Remote.Addr(), r.Range, r.Bytes)
		}
	}
	require.Len(t, got, 2)
	assert.Equal(t, "HTTP/3.0 10.71.1.1 ", got[0], "first on path 1, whole")
	assert.Regexp(t, `^HTTP/3.0 10\.71\.2\.1 (bytes=[1-9][0-9]*-1999999)?$`, got[1], "then on path 2: the rest, or all of it if it moved at the headers")
}

func TestNetnsHTTP3MoveChild(t *testing.T) {
	roots, err := testbed.ReadPool(testbed.ChildArg(t, "TestNetnsHTTP3Move"))
	require.NoError(t, err)
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
		Policy: &policy.EAF{}, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	// Not raced: the object is to start on path 1 and move.
	tr := &intents.Transport{Manager: m, HTTP3: &h3.Dialer{}, HTTP3Always: true, HTTP3RaceDelay: -1, DisableFirstRace: true,
		Base: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer tr.Close()
	var moves []string
	var mu sync.Mutex
	ctx := intents.WithDecisionTrace(context.Background(), func(di intents.DecisionInfo) {
		if di.Moving != nil {
			mu.Lock()
			moves = append(moves, di.Reason)
			mu.Unlock()
		}
	})
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://10.71.100.1/obj/2000000", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	require.NoError(t, err)
	assert.EqualValues(t, 2e6, n)
	assert.Equal(t, testbed.ObjectSum(2e6), [32]byte(h.Sum(nil)), "byte for byte the object")
	st := tr.Stats()
	assert.EqualValues(t, 1, st["p1"].Moved, "moved once, from path 1")
	assert.Equal(t, 1, st["p1"].Idle, "the connection on path 1 stays")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("2 MB in %v; bytes read on p1 %d, on p2 %d; move decisions: %q", time.Since(start).Round(time.Millisecond),
		st["p1"].BytesReceived, st["p2"].BytesReceived, moves)
}
