package intents_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsDeadPath turns path 1 into a blackhole (its link up, every
// packet lost both ways) under HTTP transfers over TCP, and checks that
// the Transport notices from the connections themselves:
//
//   - resume: in the middle of a 4 MB GET, once path 1 has carried 1 MB
//     of it; the body resumes over path 2 (a range request for the rest,
//     If-Range), byte for byte, path 1 is marked Unresponsive and the next
//     request avoids it;
//   - retry: a GET whose response the server sends into the blackhole;
//     the GET is sent again over path 2, on the spare connection opened
//     there while path 1 was probed, and once path 1 carries packets
//     again the mark clears (the path is probed) and path 1 is used again;
//   - slow: no blackhole, a server that answers after a second: the
//     connection is probed, the probe answered, and nothing is cut;
//   - outage: three bodies that cannot resume (no validator, no length)
//     on path 1, which goes silent for 16 s mid-body, as a cellular link
//     does (no delivery, the probe's answer queued behind the bodies),
//     carries for a second, and goes silent again for 3 s. The path is
//     taken for silent, but the connections stay and every body
//     completes, byte for byte, on path 1;
//   - held: such a body into a blackhole, with one connection per host:
//     it stays, out of the pool, so the next request to the host goes
//     over path 2 at once; the body ends at the caller's deadline, with a
//     PathDownError that says it could not move;
//   - twostep: a two-step download's rest into a blackhole: its caller
//     asks for the rest itself, so it does not stay (the download has
//     ten seconds);
//   - again: as resume, and then path 2 turns into a blackhole too while
//     path 1 comes back: the rest, asked for by range, resumes again
//     rather than staying (the download has ten seconds);
//   - aggregate: an aggregated download whose first range (2 MB) is on
//     path 1 when it turns into a blackhole: that range is asked for again
//     on path 2, as the others are, not held;
//   - aggregate-later: the same, the blackhole on a later range of path 1.
func TestNetnsDeadPath(t *testing.T) {
	testbed.SkipIfShort(t, "10 s")
	testbed.RequireRoot(t)
	for _, scenario := range []string{"resume", "retry", "slow", "outage", "held", "twostep", "again", "aggregate", "aggregate-later"} {
		t.Run(scenario, func(t *testing.T) {
			tb := testbed.New(t, testbed.Spec{Servers: 2, Paths: []testbed.PathSpec{
				testbed.Symmetric(20*time.Millisecond, 20e6), testbed.Symmetric(40*time.Millisecond, 20e6)}})
			web, err := tb.StartWeb(testbed.WebOptions{NoMPTCP: true})
			require.NoError(t, err)
			p1 := tb.Paths[0]
			switch scenario {
			case "resume", "twostep":
				p1.Down.OnBytes(p1.Down.Stats().Bytes+1_000_000, func() { p1.SetDown(true) })
			case "aggregate":
				p1.Down.OnBytes(p1.Down.Stats().Bytes+500_000, func() { p1.SetDown(true) })
			case "aggregate-later":
				p1.Down.OnBytes(p1.Down.Stats().Bytes+2_600_000, func() { p1.SetDown(true) })
			case "again":
				p2 := tb.Paths[1]
				p1.Down.OnBytes(p1.Down.Stats().Bytes+1_000_000, func() {
					p1.SetDown(true)
					p2.Down.OnBytes(p2.Down.Stats().Bytes+1_000_000, func() {
						p2.SetDown(true)
						p1.SetDown(false)
					})
				})
			case "retry":
				// Server 2 sends its answer to path 1 into the blackhole,
				// and opens path 1 again when the request comes over path 2.
				web.Handle(tb.Hosts[1].String(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fromP1 := strings.HasPrefix(r.RemoteAddr, "10.71.1.")
					p1.SetDown(fromP1)
					fmt.Fprint(w, strings.Repeat("x", 100_000))
				}))
			case "outage", "held":
				// No validator, no length: a body that cannot resume
				// (?small: a small one).
				web.Handle(tb.Hosts[1].String(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					size := int64(stallSize)
					if r.URL.Query().Has("small") {
						size = 1000
					}
					_, _ = io.Copy(w, io.LimitReader(testbed.NewObject(size), size))
				}))
				at := p1.Down.Stats().Bytes + 1_000_000
				if scenario == "held" {
					p1.Down.OnBytes(at, func() { p1.SetDown(true) })
					break
				}
				// Nothing for 16 s, then 24 Mbit/s for a second, nothing
				// for 3 s, then 24 Mbit/s again: the queue (deep, as a
				// cellular one) delivers what waited.
				lines := []string{"16000"}
				for ms := 16001; ms <= 60000; ms++ {
					if ms <= 17000 || ms > 20000 {
						lines = append(lines, strconv.Itoa(ms), strconv.Itoa(ms))
					}
				}
				gaps, err := testbed.ParseTrace("outage", strings.NewReader(strings.Join(lines, "\n")))
				require.NoError(t, err)
				stalled := p1.Spec.Down
				stalled.Trace, stalled.Queue = gaps, 16<<20
				p1.Down.OnBytes(at, func() { p1.Down.Set(stalled) })
			}
			testbed.RunTest(t, tb.Client, "TestNetnsDeadPathChild", scenario)
			var probes, served []string
			for _, c := range web.Conns() {
				if c.Requests == 0 {
					probes = append(probes, c.Remote.Addr().String())
				} else {
					served = append(served, fmt.Sprintf("%s %d", c.Remote.Addr(), c.Requests))
				}
			}
			t.Logf("connections served: %v; without a request (probes): %v", served, probes)
			if scenario == "resume" {
				var ranges []string
				for _, r := range web.Requests() {
					if r.Remote.Addr().String() == "10.71.2.1" && r.Range != "" {
						ranges = append(ranges, r.Range)
					}
				}
				require.Len(t, ranges, 1, "the rest asked for over path 2")
				var from int64
				_, err := fmt.Sscanf(ranges[0], "bytes=%d-3999999", &from)
				require.NoError(t, err, ranges[0])
				assert.Greater(t, from, int64(500_000), "from the byte it reached, not all of it again")
			}
			if scenario == "slow" {
				assert.Contains(t, probes, "10.71.1.1", "the quiet connection was probed, and the probe answered")
				assert.Equal(t, []string{"10.71.1.1 1"}, served, "nothing cut, nothing sent again")
			}
			if scenario == "outage" {
				assert.Equal(t, []string{"10.71.1.1 1", "10.71.1.1 1", "10.71.1.1 1"}, served, "nothing cut, nothing sent again")
			}
		})
	}
}

// heldCount sums the connections a Manager's debug log says it held on a
// path taken for silent.
type heldCount struct{ n atomic.Int64 }

func (h *heldCount) Enabled(context.Context, slog.Level) bool { return true }
func (h *heldCount) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "intents: path unresponsive" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "held" {
				h.n.Add(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}
func (h *heldCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *heldCount) WithGroup(string) slog.Handler      { return h }

// stallSize is the body of the stall and held cases.
const stallSize = 4_000_000

func TestNetnsDeadPathChild(t *testing.T) {
	scenario := testbed.ChildArg(t, "TestNetnsDeadPath")
	log := make(intents.DebugLog, 256)
	held := &heldCount{}
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
		Logger: slog.New(slog.NewMultiHandler(log, held))})
	require.NoError(t, err)
	defer m.Close()
	tr := &intents.Transport{Manager: m}
	switch scenario {
	case "held":
		tr.MaxConnsPerHost = 1
	case "twostep":
		tr.TwoStep = 8 << 10
	case "aggregate", "aggregate-later":
		tr.Aggregate = &intents.Aggregate{MinChunk: 2 << 20}
	}
	defer tr.Close()
	var mu sync.Mutex
	var local []string
	var reused []bool
	var excluded []intents.Exclusion
	ctx := intents.WithIntents(context.Background(), intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}})
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		mu.Lock()
		defer mu.Unlock()
		local = append(local, netip.MustParseAddrPort(info.Conn.LocalAddr().String()).Addr().String())
		reused = append(reused, info.Reused)
	}})
	ctx = intents.WithDecisionTrace(ctx, func(d intents.DecisionInfo) {
		mu.Lock()
		defer mu.Unlock()
		excluded = d.Excluded
	})
	get := func(url string) (int64, [32]byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		require.NoError(t, err)
		t.Logf("%s: %d bytes in %v", url, n, time.Since(start).Round(time.Millisecond))
		return n, [32]byte(h.Sum(nil))
	}
	// getWithin fetches the object of size bytes from server 1, byte for
	// byte, within d.
	getWithin := func(size int64, d time.Duration) {
		outer := ctx
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer func() { cancel(); ctx = outer }()
		n, sum := get(fmt.Sprintf("http://10.71.100.1/obj/%d", size))
		assert.EqualValues(t, size, n)
		assert.Equal(t, testbed.ObjectSum(size), sum, "byte for byte")
	}
	lastLocal := func() string {
		mu.Lock()
		defer mu.Unlock()
		return local[len(local)-1]
	}
	unresponsive := intents.Exclusion{Path: "p1", Reason: "unresponsive (carried nothing while data was owed; probed until it answers)"}
	switch scenario {
	case "resume":
		const size = 4_000_000
		n, sum := get(fmt.Sprintf("http://10.71.100.1/obj/%d", size))
		assert.EqualValues(t, size, n)
		assert.Equal(t, testbed.ObjectSum(size), sum, "byte for byte")
		assert.Equal(t, "10.71.2.1", lastLocal(), "resumed over path 2")
		assert.True(t, m.Path("p1").Estimate().Unresponsive, "path 1 marked")
		get("http://10.71.100.1/obj/1000")
		assert.Equal(t, "10.71.2.1", lastLocal())
		mu.Lock()
		assert.Contains(t, excluded, unresponsive, "path 1 left out, and why")
		mu.Unlock()
	case "retry":
		n, _ := get("http://10.71.100.2/")
		assert.EqualValues(t, 100_000, n)
		assert.Equal(t, []string{"10.71.1.1", "10.71.2.1"}, local, "sent again over path 2")
		assert.Equal(t, []bool{false, true}, reused, "on the spare connection opened while path 1 was probed")
		log.Await(t, "intents: path answers again")
		assert.False(t, m.Path("p1").Estimate().Unresponsive)
		get("http://10.71.100.1/obj/1000")
		assert.Equal(t, "10.71.1.1", lastLocal(), "path 1 used again")
	case "twostep":
		getWithin(4_000_000, 10*time.Second)
		assert.Equal(t, "10.71.2.1", lastLocal(), "the rest asked for over path 2")
	case "aggregate", "aggregate-later":
		getWithin(6_000_000, 10*time.Second)
		assert.True(t, m.Path("p1").Estimate().Unresponsive, "path 1 marked")
		// Its caller asks for each range again: none is held, though the
		// download would still complete (a range slow to finish is also
		// asked for on the faster path).
		assert.Zero(t, held.n.Load(), "connections held on the silent path")
	case "again":
		getWithin(6_000_000, 10*time.Second)
		assert.Equal(t, []string{"10.71.1.1", "10.71.2.1", "10.71.1.1"}, local, "path 1, its rest over path 2, the rest of that over path 1")
	case "outage":
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				start := time.Now()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://10.71.100.2/?i=%d", i), nil)
				if !assert.NoError(t, err) {
					return
				}
				resp, err := tr.RoundTrip(req)
				if !assert.NoError(t, err) {
					return
				}
				defer resp.Body.Close()
				h := sha256.New()
				n, err := io.Copy(h, resp.Body)
				assert.NoError(t, err, "never cut")
				assert.EqualValues(t, stallSize, n)
				assert.Equal(t, testbed.ObjectSum(stallSize), [32]byte(h.Sum(nil)), "byte for byte")
				t.Logf("body %d: %d bytes in %v", i, n, time.Since(start).Round(time.Millisecond))
			})
		}
		log.Await(t, "intents: path unresponsive") // the outage looked like a blackhole
		wg.Wait()
		assert.Equal(t, []string{"10.71.1.1", "10.71.1.1", "10.71.1.1"}, local, "on path 1 throughout")
		assert.Positive(t, held.n.Load(), "they stayed")
	case "held":
		bodyCtx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(bodyCtx, http.MethodGet, "http://10.71.100.2/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		read := make(chan error, 1)
		start := time.Now()
		var n int64
		go func() {
			var err error
			n, err = io.Copy(io.Discard, resp.Body)
			read <- err
		}()
		log.Await(t, "intents: path unresponsive")
		small, _ := get("http://10.71.100.2/?small")
		assert.EqualValues(t, 1000, small, "the host's one place not held by the body that stayed")
		assert.Equal(t, "10.71.2.1", lastLocal(), "over path 2")
		err = <-read
		t.Logf("%d bytes, then %v after %v", n, err, time.Since(start).Round(time.Millisecond))
		require.ErrorIs(t, err, context.DeadlineExceeded, "it ends at the caller's deadline, not before")
		require.ErrorIs(t, err, intents.ErrPathDown)
		var down *intents.PathDownError
		require.ErrorAs(t, err, &down)
		assert.Equal(t, "p1", down.Path)
		assert.True(t, down.Stayed)
		assert.Contains(t, err.Error(), "could not move to another path")
		assert.Less(t, n, int64(stallSize))
		assert.Equal(t, int64(1), held.n.Load(), "it stayed")
		assert.True(t, m.Path("p1").Estimate().Unresponsive, "path 1 marked")
	case "slow":
		n, _ := get("http://10.71.100.1/obj/1000?delay=1s")
		assert.EqualValues(t, 1000, n)
		assert.Equal(t, []string{"10.71.1.1"}, local)
		assert.False(t, m.Path("p1").Estimate().Unresponsive)
	}
}
