package intents

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/estimate"
)

func get(t *testing.T, tr http.RoundTripper, ctx context.Context, url string) (string, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body), resp
}

// traced returns a context whose GotConn reports into reused.
func traced(reused *[]bool) context.Context {
	var mu sync.Mutex
	return httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		mu.Lock()
		*reused = append(*reused, i.Reused)
		mu.Unlock()
	}})
}

func TestTransportReusesHTTP1(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello ", r.URL.Path)
	}))
	defer srv.Close()
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	var reused []bool
	ctx := traced(&reused)
	for _, p := range []string{"/a", "/b", "/c"} {
		body, resp := get(t, tr, ctx, srv.URL+p)
		assert.Equal(t, "hello "+p, body)
		assert.Equal(t, "HTTP/1.1", resp.Proto)
	}
	assert.Equal(t, []bool{false, true, true}, reused)
	st := tr.Stats()[""]
	assert.EqualValues(t, 1, st.Dials)
	assert.EqualValues(t, 2, st.Reuses)
	assert.EqualValues(t, 3, st.Requests)
	assert.EqualValues(t, 3*len("hello /a"), st.BytesReceived)
	assert.Equal(t, 1, st.Idle)
}

// A body's bytes count in Stats as they are read, not once it closes:
// what a progress display shows.
func TestTransportStatsCountBytesAsRead(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2000")
		w.Write(make([]byte, 1000))
		http.NewResponseController(w).Flush()
		<-release
		w.Write(make([]byte, 1000))
	}))
	defer srv.Close()
	defer close(release)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.ReadFull(resp.Body, make([]byte, 1000))
	require.NoError(t, err)
	assert.EqualValues(t, 1000, tr.Stats()[""].BytesReceived, "the first half, its rest not sent yet")
}

func TestTransportHTTP2Multiplexes(t *testing.T) {
	var inFlight, maxInFlight atomic.Int32
	gate := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			fmt.Fprint(w, r.Proto)
			return
		}
		n := inFlight.Add(1)
		if n == 10 {
			close(gate) // all ten are in flight at once, on one connection
		}
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		<-gate
		inFlight.Add(-1)
		fmt.Fprint(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	tr := &Transport{Base: base}
	defer tr.CloseIdleConnections()

	// The first request opens the connection; the others multiplex on it.
	_, first := get(t, tr, context.Background(), srv.URL+"/warm")
	assert.Equal(t, "HTTP/2.0", first.Proto)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			body, _ := get(t, tr, context.Background(), srv.URL)
			assert.Equal(t, "HTTP/2.0", body)
		})
	}
	wg.Wait()
	assert.EqualValues(t, 10, maxInFlight.Load())
	assert.EqualValues(t, 1, tr.Stats()[""].Dials, "one HTTP/2 connection carried all")
}

// connCounter counts a server's open connections and their maximum.
type connCounter struct {
	mu        sync.Mutex
	open, max int
}

func (c *connCounter) hook(_ net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateNew:
		c.open++
		c.max = max(c.max, c.open)
	case http.StateClosed, http.StateHijacked:
		c.open--
	}
}

func TestTransportLimitsUnder200ConcurrentRequests(t *testing.T) {
	var inFlight atomic.Int32
	atLimit := make(chan struct{})
	gate := make(chan struct{})
	var once sync.Once
	var total connCounter
	var servers []*httptest.Server
	var counters []*connCounter
	for range 3 {
		cc := &connCounter{}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if inFlight.Add(1) == DefaultMaxConns {
				once.Do(func() { close(atLimit) })
			}
			<-gate
			inFlight.Add(-1)
			io.WriteString(w, "ok")
		}))
		srv.Config.ConnState = func(c net.Conn, s http.ConnState) { cc.hook(c, s); total.hook(c, s) }
		srv.Start()
		defer srv.Close()
		servers = append(servers, srv)
		counters = append(counters, cc)
	}
	tr := &Transport{MaxConnsPerHost: DefaultMaxConnsPerHost, MaxConns: DefaultMaxConns}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			body, _ := get(t, tr, context.Background(), servers[i%3].URL)
			assert.Equal(t, "ok", body)
		})
	}
	<-atLimit
	// Nothing has finished yet, so the servers' counts are exact: no
	// connection closed by the client can still look open to them. (Later,
	// idle connections are closed to make room for other hosts, and a
	// server sees the close a moment after the client made it.)
	for i, cc := range counters {
		cc.mu.Lock()
		assert.LessOrEqual(t, cc.max, DefaultMaxConnsPerHost, "server %d", i)
		cc.mu.Unlock()
	}
	total.mu.Lock()
	assert.Equal(t, DefaultMaxConns, total.max, "the total limit binds, and holds")
	total.mu.Unlock()
	p := tr.Stats()
	assert.Equal(t, DefaultMaxConns, p[""].Active+p[""].Idle)
	close(gate)
	wg.Wait()
	assert.LessOrEqual(t, tr.Stats()[""].Active+tr.Stats()[""].Idle, DefaultMaxConns)
}

// closingServer closes, without a word, every connection on its second
// request, as a server does that times out idle connections just as the
// client reuses one.
func closingServer(t *testing.T, posts *atomic.Int32) *httptest.Server {
	type connKey struct{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			posts.Add(1)
		}
		n := r.Context().Value(connKey{}).(*atomic.Int32).Add(1)
		if n == 2 {
			c, _, err := http.NewResponseController(w).Hijack()
			require.NoError(t, err)
			c.Close()
			return
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int32))
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func TestTransportRetriesIdempotentOnDeadReusedConn(t *testing.T) {
	var posts atomic.Int32
	srv := closingServer(t, &posts)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for i := range 1000 {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, "request %d", i)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, "ok", string(body))
	}
}

func TestTransportNeverReplaysPOST(t *testing.T) {
	var posts atomic.Int32
	srv := closingServer(t, &posts)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	body, _ := get(t, tr, context.Background(), srv.URL)
	require.Equal(t, "ok", body)
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("payload"))
	_, err := tr.RoundTrip(req)
	require.Error(t, err, "the server dropped the connection with the POST")
	assert.EqualValues(t, 1, posts.Load(), "and it was not sent again")
}

func TestTransportCancelWhileWaitingFreesSlot(t *testing.T) {
	gate, inSlow := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(inSlow)
			<-gate
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tr := &Transport{MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	tr.init()

	slow := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("GET", srv.URL+"/slow", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	<-inSlow // the only slot is taken
	ctx, cancel := context.WithCancel(context.Background())
	tr.core.mu.Lock()
	tr.core.sched.testHookQueued = cancel // give up once waiting
	tr.core.mu.Unlock()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	_, err := tr.RoundTrip(req)
	require.ErrorIs(t, err, context.Canceled)
	tr.core.mu.Lock()
	tr.core.sched.testHookQueued = nil
	assert.Empty(t, tr.core.sched.queue.ws)
	tr.core.mu.Unlock()

	close(gate)
	require.NoError(t, <-slow)
	var reused []bool
	body, _ := get(t, tr, traced(&reused), srv.URL)
	assert.Equal(t, "ok", body)
	assert.Equal(t, []bool{true}, reused, "the slot is free again and the connection reused")
}

func TestTransportRejectsBadRequests(t *testing.T) {
	tr := &Transport{}
	for _, url := range []string{"ftp://example.com/", "http:///path"} {
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		assert.Error(t, err, url)
	}
}

// knownSize is the size tr remembers for the object at rawURL.
func knownSize(t *testing.T, tr *Transport, rawURL string) int64 {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	return tr.knownSize(u)
}

func TestTransportRemembersSizes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 1234))
	}))
	defer srv.Close()
	tr := &Transport{MaxSizeHints: 2}
	defer tr.CloseIdleConnections()
	get(t, tr, context.Background(), srv.URL+"/a")
	assert.EqualValues(t, 1234, knownSize(t, tr, srv.URL+"/a"))
	get(t, tr, context.Background(), srv.URL+"/b")
	get(t, tr, context.Background(), srv.URL+"/c")
	assert.Zero(t, knownSize(t, tr, srv.URL+"/a"), "the oldest is forgotten beyond MaxSizeHints")
	assert.EqualValues(t, 1234, knownSize(t, tr, srv.URL+"/c"))
}

// A small body arrives with its headers and is read in microseconds: taken
// as a rate sample it would claim gigabits of capacity and send every
// large transfer to its path.
func TestCountingBodySamplesOnlyAfterTheFirstRead(t *testing.T) {
	read := func(body io.Reader) estimate.Snapshot {
		p := &Path{Name: "p", est: estimate.New(0, 0)}
		tr := &Transport{}
		tr.init()
		cb := newCountingBody(io.NopCloser(body), tr, &entry{path: p})
		_, err := io.Copy(io.Discard, cb)
		require.NoError(t, err)
		require.NoError(t, cb.Close())
		return p.est.Snapshot()
	}
	assert.Zero(t, read(strings.NewReader(strings.Repeat("x", 1000))).MaxRate, "1 kB in one read: no sample")
	// 100 kB in reads of 16 kB: a sample of what came after the first.
	assert.Positive(t, read(iotest.HalfReader(strings.NewReader(strings.Repeat("x", 100_000)))).MaxRate)
}

// pacedReader returns chunk bytes every interval, as a slow path delivers
// a body (in a synctest bubble its sleeps are the fake clock's).
type pacedReader struct {
	chunk    int
	interval time.Duration
}

func (r pacedReader) Read(p []byte) (int, error) {
	time.Sleep(r.interval)
	return min(len(p), r.chunk), nil
}

// A body still arriving tells its path's estimates what it has seen, once
// it has been arriving for a few round trips: a page's first responses on
// a slow path take seconds, and its capacity is a guess until then. By
// hand: 16 kB every 80 ms is 1.6 Mbit/s; at 50 ms a round, slow start
// would have brought the 48 kB after the first read in 2 rounds, 100 ms,
// and they took 240 ms: the path held them back, so the rate is its
// capacity.
func TestCountingBodyTellsItsPathBeforeItEnds(t *testing.T) {
	tr := &Transport{}
	tr.init()
	synctest.Test(t, func(t *testing.T) {
		p := &Path{Name: "p", est: estimate.New(0, 0)}
		p.est.AddRTT(50 * time.Millisecond)
		cb := newCountingBody(io.NopCloser(pacedReader{chunk: 16_000, interval: 80 * time.Millisecond}), tr, &entry{path: p})
		buf := make([]byte, 16_000)
		read := func(n int) {
			for range n {
				_, err := cb.Read(buf)
				require.NoError(t, err)
			}
		}
		read(3) // 160 ms since the first read: too soon to tell
		assert.Zero(t, p.est.Snapshot().MaxRate)
		read(1)
		s := p.est.Snapshot()
		assert.True(t, s.CapacityShown, "held back by the path")
		assert.InDelta(t, 1.6e6, s.MaxRate, 1e3)
		require.NoError(t, cb.Close())
	})
}

// Without a size hint, a request expects what the last response to its URL
// had, or else the median of its origin's recent responses, or else, from
// an origin not heard from yet, that of every origin's; the decision trace
// says which.
func TestTransportPredictsSizes(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sizes := map[string]int{"/a": 3000, "/b": 1000, "/c": 100_000, "/d": 10, "/e": 20}
		io.WriteString(w, strings.Repeat("x", sizes[r.URL.Path]))
	})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	other := httptest.NewServer(handler) // another origin: another port
	defer other.Close()
	tr := &Transport{Manager: loManager(t, nil)}
	defer tr.CloseIdleConnections()
	type seen struct {
		size   int64
		source sizeSource
	}
	askAt := func(url string) seen {
		var s seen
		ctx := WithDecisionTrace(context.Background(), func(di DecisionInfo) {
			s = seen{di.Intents.SizeToBeReceived, sizeSource(di.SizeSource)}
		})
		get(t, tr, ctx, url)
		return s
	}
	ask := func(path string) seen { return askAt(srv.URL + path) }
	assert.Equal(t, seen{0, ""}, ask("/a"), "nothing known yet")
	assert.Equal(t, seen{3000, sizeFromOrigin}, ask("/b"), "a new URL: what the origin's one response had")
	assert.Equal(t, seen{3000, sizeFromURL}, ask("/a"), "a URL seen before: its last size")
	assert.Equal(t, seen{1000, sizeFromOrigin}, ask("/c"),
		"of two sizes the smaller, not 3000: /a's same size again is no new sample")
	assert.Equal(t, seen{3000, sizeFromOrigin}, ask("/d"),
		"the median of 3000, 1000 and 100000: one large object does not make the next expect 34 kB")
	assert.Equal(t, seen{1000, sizeFromRecent}, askAt(other.URL+"/e"),
		"an origin not heard from: the median of every origin's (10, 1000, 3000, 100000), not nothing")
	assert.Equal(t, seen{20, sizeFromOrigin}, askAt(other.URL+"/a"),
		"once it has answered: its own, 20 bytes, though /a was 3000 from the other origin")
	var hinted seen
	ctx := WithDecisionTrace(WithIntents(context.Background(), Intents{SizeToBeReceived: 77}), func(di DecisionInfo) {
		hinted = seen{di.Intents.SizeToBeReceived, sizeSource(di.SizeSource)}
	})
	get(t, tr, ctx, srv.URL+"/c")
	assert.Equal(t, seen{77, sizeFromIntents}, hinted, "the caller's hint wins")
}

// Once a response's headers are in, its connection is known to owe the
// Content-Length, whatever was predicted: the decisions made while the
// body arrives see that backlog.
func TestPendingFollowsTheContentLength(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", "50000")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-release
			w.Write(make([]byte, 50000))
			return
		}
		io.WriteString(w, "small")
	}))
	defer srv.Close()
	defer close(release)
	tr := &Transport{Manager: loManager(t, nil)}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest("GET", srv.URL+"/big", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var pending []int64
	ctx := WithDecisionTrace(context.Background(), func(di DecisionInfo) {
		for _, c := range di.Candidates {
			pending = append(pending, c.Pending)
		}
	})
	get(t, tr, ctx, srv.URL+"/small")
	assert.Contains(t, pending, int64(50000), "the busy connection owes the body its headers announced")
}

// A pooled HTTP/1.1 connection has one slot: taken, it is taken until the
// round trip has returned and the body is done, so no request is ever sent
// where it would wait for another's.
func TestClientConnSlots(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	hc, err := base.NewClientConn(context.Background(), "http", u.Host)
	require.NoError(t, err)
	c := &clientConn{cc: hc}
	defer c.close()
	require.Equal(t, 1, c.available())
	require.True(t, c.reserve())
	assert.Zero(t, c.available(), "taken")
	assert.Equal(t, 1, c.inFlight(), "a taken slot counts as in flight")
	assert.False(t, c.reserve(), "one slot only")
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := c.roundTrip(req)
	require.NoError(t, err)
	assert.Zero(t, c.available(), "busy while its body is read")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, 1, c.available(), "free again")
	assert.True(t, c.reserve())
	c.unreserve()
	assert.Equal(t, 1, c.available(), "a slot given back unused")
}

// A path's delivery over a window of ticks is what its interface received
// where its counters were read at every tick: what this library read
// includes bytes that had waited in its sockets from before the window
// (here 20 % more than arrived). Where a tick lacks the counters, the
// larger of the two counts, as before.
func TestDeliveryWindowCountsWhatArrived(t *testing.T) {
	var w deliveryWindow
	for k := range deliveryTicks {
		bytes, d, ok := w.add(120_000, 100_000, 100*time.Millisecond)
		if k < deliveryTicks-1 {
			assert.False(t, ok, "a window needs %d ticks", deliveryTicks)
			continue
		}
		require.True(t, ok)
		assert.EqualValues(t, 1_000_000, bytes, "what the interface received")
		assert.Equal(t, time.Second, d)
	}
	bytes, _, ok := w.add(120_000, -1, 100*time.Millisecond) // counters not read at this tick
	require.True(t, ok)
	assert.EqualValues(t, 1_200_000, bytes, "the larger, read by this library")
}

// scheduledReader returns each of its reads after its delay, as a path
// delivers a body (in a synctest bubble its sleeps are the fake clock's).
type scheduledReader struct {
	reads []scheduledRead
}

type scheduledRead struct {
	after time.Duration
	n     int
}

func (r *scheduledReader) Read(p []byte) (int, error) {
	if len(r.reads) == 0 {
		return 0, io.EOF
	}
	next := r.reads[0]
	r.reads = r.reads[1:]
	time.Sleep(next.after)
	return min(len(p), next.n), nil
}

// A 24 kB body, a page's first response, on a path of 2 Mbit/s at 50 ms
// takes 96 ms, as long as its two slow-start rounds could on a fast path
// (AddTransfer's test): its first flight, spread by the path, tells the
// path's capacity before the body ends. On a fast path the flight comes at
// the sender's pace, and the second round a round trip later is not taken
// for a spread flight; nor is a flight that a loss held back.
func TestCountingBodyTimesItsFirstFlight(t *testing.T) {
	tr := &Transport{}
	tr.init()
	const segment = 1448
	// A first read with the headers' chunk, then 16 segments one at a
	// time every, the gapBefore-th (from 1) after a gap as well.
	body := func(every time.Duration, gapBefore int, gap time.Duration) *scheduledReader {
		r := &scheduledReader{reads: []scheduledRead{{0, 1000}}}
		for i := 1; i <= 16; i++ {
			after := every
			if i == gapBefore {
				after += gap
			}
			r.reads = append(r.reads, scheduledRead{after, segment})
		}
		return r
	}
	read := func(t *testing.T, cb *countingBody, reads int) {
		buf := make([]byte, segment)
		for range reads {
			_, err := cb.Read(buf)
			require.NoError(t, err)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		p := &Path{Name: "p", est: estimate.New(0, 0)}
		p.est.AddRTT(50 * time.Millisecond)
		cb := newCountingBody(io.NopCloser(body(5790*time.Microsecond, 0, 0)), tr, &entry{path: p})
		read(t, cb, 10) // 14 kB, the flight less the headers' room
		assert.False(t, p.est.Snapshot().CapacityShown, "the flight is not over")
		read(t, cb, 2) // past one window, 64 ms in: too soon for any other sample
		s := p.est.Snapshot()
		assert.True(t, s.CapacityShown, "the path spread the flight")
		assert.InDelta(t, 2e6, s.MaxRate, 0.1e6)
		require.NoError(t, cb.Close())
	})
	synctest.Test(t, func(t *testing.T) {
		p := &Path{Name: "p", est: estimate.New(0, 0)}
		p.est.AddRTT(50 * time.Millisecond)
		// The tenth segment is the first of the second round.
		cb := newCountingBody(io.NopCloser(body(500*time.Microsecond, 10, 50*time.Millisecond)), tr, &entry{path: p})
		read(t, cb, 17) // every byte but the end
		assert.False(t, p.est.Snapshot().CapacityShown, "23 Mbit/s, the sender's pace, and a round trip before the next round")
		require.NoError(t, cb.Close())
	})
	synctest.Test(t, func(t *testing.T) {
		p := &Path{Name: "p", est: estimate.New(0, 0)}
		p.est.AddRTT(50 * time.Millisecond)
		// The fifth segment lost and sent again a round trip later.
		cb := newCountingBody(io.NopCloser(body(5790*time.Microsecond, 5, 50*time.Millisecond)), tr, &entry{path: p})
		read(t, cb, 12) // past one window, 114 ms in: too soon for any other sample
		assert.False(t, p.est.Snapshot().CapacityShown, "a flight held back by a loss is not the path's pace")
		require.NoError(t, cb.Close())
	})
}

type fakeHTTP3 struct{ HTTP3Dialer }

// Clone copies every exported setting: each is set to a value other than
// its zero, and the clone must carry it.
func TestTransportCloneCopiesEverySetting(t *testing.T) {
	orig := &Transport{}
	v := reflect.ValueOf(orig).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Interface:
			f.Set(reflect.ValueOf(fakeHTTP3{}))
		default:
			t.Fatalf("field %s of kind %s: teach this test to set it", sf.Name, f.Kind())
		}
	}
	clone := reflect.ValueOf(orig.Clone()).Elem()
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		assert.False(t, clone.Field(i).IsZero(), "Clone left %s unset", sf.Name)
	}
}
