package intents

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/estimate"
)

// raceServer answers GET /obj?size=N with a body of N bytes, each byte
// telling which arrival (1, 2) it went to; serve serves each arrival, and
// may wait on held, which release closes.
func raceServer(t *testing.T, serve func(n int, w http.ResponseWriter, body []byte, held <-chan struct{})) (url string, release func()) {
	t.Helper()
	var arrivals atomic.Int32
	held := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(arrivals.Add(1))
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		serve(n, w, bytes.Repeat([]byte{byte('0' + n)}, size), held)
	}))
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(release) // before the server's Close, which waits for its handlers
	return srv.URL + "/obj", release
}

// raceTransport is a Transport over a loopback Manager, and its one path
// twice: a race's entrants both go over loopback.
func raceTransport(t *testing.T) (*Transport, *Path) {
	m := loManager(t, nil)
	t.Cleanup(func() { m.Close() })
	tr := &Transport{Manager: m}
	tr.init() // as RoundTrip does before it races
	t.Cleanup(func() { tr.Close() })
	return tr, m.Paths()[0]
}

func raceGet(t *testing.T, tr *Transport, p *Path, url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return tr.raceFirst(req, Intents{}, p, p)
}

func TestRaceFirstReturnsTheBodyInFirst(t *testing.T) {
	for _, size := range []int{10_000, raceBodyBytes, 3 * raceBodyBytes} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			url, release := raceServer(t, func(n int, w http.ResponseWriter, body []byte, held <-chan struct{}) {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				if n == 1 {
					// The first to arrive sends a quarter, then waits.
					quarter := len(body) / 4
					w.Write(body[:quarter])
					w.(http.Flusher).Flush()
					<-held
					body = body[quarter:]
				}
				w.Write(body)
			})
			tr, p := raceTransport(t)
			resp, err := raceGet(t, tr, p, url+"?size="+strconv.Itoa(size))
			require.NoError(t, err)
			release() // the held one may end now: its bytes must not be what the caller reads
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, bytes.Repeat([]byte{'2'}, size), got, "the body that came first, byte for byte")
		})
	}
}

func TestRaceFirstOneFails(t *testing.T) {
	url, _ := raceServer(t, func(n int, w http.ResponseWriter, body []byte, held <-chan struct{}) {
		if n == 1 {
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.Write(body)
	})
	tr, p := raceTransport(t)
	resp, err := raceGet(t, tr, p, url+"?size=5000")
	require.NoError(t, err, "the other entrant's answer")
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, bytes.Repeat([]byte{'2'}, 5000), got)
}

func TestRaceFirstBothFail(t *testing.T) {
	url, _ := raceServer(t, func(n int, w http.ResponseWriter, body []byte, held <-chan struct{}) {
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			c.Close()
		}
	})
	tr, p := raceTransport(t)
	resp, err := raceGet(t, tr, p, url+"?size=5000")
	require.Error(t, err)
	assert.Nil(t, resp)
}

// A body of unknown length may stream without end: the headers decide,
// and the caller reads it as it comes.
func TestRaceFirstUnknownLengthDecidesAtHeaders(t *testing.T) {
	url, release := raceServer(t, func(n int, w http.ResponseWriter, body []byte, held <-chan struct{}) {
		w.Write([]byte("event\n"))
		w.(http.Flusher).Flush() // chunked: no length
		<-held
	})
	tr, p := raceTransport(t)
	resp, err := raceGet(t, tr, p, url)
	require.NoError(t, err)
	assert.EqualValues(t, -1, resp.ContentLength)
	rb := resp.Body.(*racedBody)
	<-rb.e.done
	assert.Empty(t, rb.e.head, "nothing of a body of unknown length read before the caller")
	line := make([]byte, 6)
	_, err = io.ReadFull(resp.Body, line)
	require.NoError(t, err)
	assert.Equal(t, "event\n", string(line))
	release()
	resp.Body.Close()
}

// The caller's cancellation ends both entrants, and the call, at once.
func TestRaceFirstCancelled(t *testing.T) {
	url, _ := raceServer(t, func(n int, w http.ResponseWriter, body []byte, held <-chan struct{}) {
		w.Header().Set("Content-Length", "100")
		w.Write(body[:10])
		w.(http.Flusher).Flush()
		<-held
	})
	tr, p := raceTransport(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"?size=100", nil)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		resp, err := tr.raceFirst(req, Intents{}, p, p)
		if resp != nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
}

// A loser's body stays where it is: it only shows its path's capacity.
// The winner's may move once the race is decided.
func TestRaceEntrantsHeld(t *testing.T) {
	ended := func() *entrant {
		e := &entrant{cancel: func() {}, resp: &http.Response{Body: http.NoBody}, done: make(chan struct{})}
		e.held.Store(true)
		close(e.done)
		return e
	}
	w, l := ended(), ended()
	won, lost := &moveCheck{race: &w.raceEntry}, &moveCheck{race: &l.raceEntry}
	assert.True(t, won.held(), "held while racing")
	(&Transport{}).raceWon(&http.Request{URL: &url.URL{Scheme: "http"}}, w, l, time.Now())
	assert.False(t, won.held(), "the winner's body may move")
	assert.True(t, lost.held(), "the loser's stays")
	assert.False(t, (&moveCheck{}).held(), "a request that did not race")
}

// racer is a Racer that races whenever asked.
type racer struct{ PolicyFunc }

func (racer) RacesFirst(*Request) bool { return true }

func TestFirstRacePaths(t *testing.T) {
	a, b := fakePath("a", "10.9.0.1"), fakePath("b", "10.9.1.1")
	every := racer{PolicyFunc(func(req *Request, d *Decision) {
		for _, p := range req.Paths {
			d.Choices = append(d.Choices, Choice{Path: p})
		}
	})}
	newTransportWith := func(policy Policy, paths ...*Path) *Transport {
		m := loManager(t, policy)
		t.Cleanup(func() { m.Close() })
		m.paths.Store(&paths)
		return &Transport{Manager: m}
	}
	newTransport := func(paths ...*Path) *Transport { return newTransportWith(every, paths...) }
	get := func(method string, url string) *http.Request {
		req, err := http.NewRequest(method, url, nil)
		require.NoError(t, err)
		return req
	}
	races := func(tr *Transport, req *http.Request, in Intents) bool {
		_, _, ok := tr.firstRacePaths(req, &in)
		return ok
	}
	tr := newTransport(a, b)
	x, y, ok := tr.firstRacePaths(get("GET", "http://192.0.2.1/"), &Intents{})
	require.True(t, ok, "a first GET with nothing known of either path")
	assert.ElementsMatch(t, []*Path{a, b}, []*Path{x, y})
	assert.False(t, races(tr, get("GET", "http://192.0.2.1/"), Intents{}), "one race per Transport")

	for name, c := range map[string]struct {
		req   *http.Request
		in    Intents
		paths []*Path
	}{
		"POST":     {req: get("POST", "http://192.0.2.1/")},
		"loopback": {req: get("GET", "http://127.0.0.1/")},
		"upgrade": {req: func() *http.Request {
			r := get("GET", "http://192.0.2.1/")
			r.Header.Set("Upgrade", "websocket")
			return r
		}()},
		"a body": {req: func() *http.Request {
			r := get("GET", "http://192.0.2.1/")
			r.Body = io.NopCloser(strings.NewReader("x"))
			return r
		}()},
		"MPTCP":      {req: get("GET", "http://192.0.2.1/"), in: Intents{Multipath: MultipathAggregate}},
		"one path":   {req: get("GET", "http://192.0.2.1/"), paths: []*Path{a}},
		"avoided":    {req: get("GET", "http://192.0.2.1/"), in: Intents{Interfaces: map[string]Level{"b": LevelAvoid}}},
		"prohibited": {req: get("GET", "http://192.0.2.1/"), in: Intents{Interfaces: map[string]Level{"b": LevelProhibit}}},
		"expensive": {req: get("GET", "http://192.0.2.1/"), paths: []*Path{a, func() *Path {
			p := fakePath("c", "10.9.2.1")
			p.Expensive = true
			return p
		}()}},
		"a capacity known": {req: get("GET", "http://192.0.2.1/"), paths: []*Path{a, func() *Path {
			p := fakePath("d", "10.9.3.1")
			p.est = estimate.New(0, 20e6)
			return p
		}()}},
	} {
		paths := c.paths
		if paths == nil {
			paths = []*Path{a, b}
		}
		assert.False(t, races(newTransport(paths...), c.req, c.in), name)
	}
	assert.False(t, races(newTransportWith(racer{PolicyFunc(func(req *Request, d *Decision) {
		d.Choices = append(d.Choices, Choice{Path: req.Paths[0]})
	})}, a, b), get("GET", "http://192.0.2.1/"), Intents{}), "a policy that names one path")
	assert.False(t, races(newTransportWith(every.PolicyFunc, a, b), get("GET", "http://192.0.2.1/"), Intents{}), "a policy that is not a Racer")
	off := newTransport(a, b)
	off.DisableFirstRace = true
	assert.False(t, races(off, get("GET", "http://192.0.2.1/"), Intents{}), "DisableFirstRace")
}

// A loser shows a ceiling where it lost on its rate, nothing where its
// round trips alone explain its loss.
func TestLostRace(t *testing.T) {
	withRTT := func(name string, rtt time.Duration) *Path {
		p := fakePath(name, "10.9.0.1")
		p.est = estimate.New(rtt, 0)
		return p
	}
	// 10 kB in 105 ms: over 10 ms round trips that is at most 0.95 Mbit/s
	// (its handshake and request take 20 ms), over the winner's 50 ms
	// 16 Mbit/s at least.
	slow, fast := withRTT("slow", 10*time.Millisecond), withRTT("fast", 50*time.Millisecond)
	lostRace(slow, fast, 10_000, 105*time.Millisecond, false)
	e := slow.Estimate()
	assert.False(t, e.BandwidthFloor, "a capacity shown")
	assert.InDelta(t, 10_000*8/0.085, float64(e.Bandwidth), 1e4)

	far, near := withRTT("far", 100*time.Millisecond), withRTT("near", 20*time.Millisecond)
	lostRace(far, near, 10_000, 80*time.Millisecond, false)
	assert.Zero(t, far.Estimate().Bandwidth, "its round trips explain its loss")

	twin, other := withRTT("twin", 20*time.Millisecond), withRTT("other", 20*time.Millisecond)
	lostRace(twin, other, 10_000, 45*time.Millisecond, false)
	assert.Zero(t, twin.Estimate().Bandwidth, "not clearly slower than the winner")
}

// Bodies that keep both entrants waiting do not keep the caller waiting:
// raceBodyWait after the first headers, the one with more of its body is
// the answer, and its caller reads all of it as it comes.
func TestRaceFirstBodiesStall(t *testing.T) {
	const size = 100_000
	url, release := raceServer(t, func(n int, w http.ResponseWriter, body []byte, held <-chan struct{}) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		sent := 10 * n // the second to arrive has sent more when both stall
		w.Write(body[:sent])
		w.(http.Flusher).Flush()
		<-held
		w.Write(body[sent:])
	})
	tr, p := raceTransport(t)
	type result struct {
		resp *http.Response
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		resp, err := raceGet(t, tr, p, url+"?size="+strconv.Itoa(size))
		ch <- result{resp, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-time.After(30 * raceBodyWait):
		release()
		require.FailNow(t, "the race waited for a stalled body")
	}
	require.NoError(t, r.err)
	release()
	got, err := io.ReadAll(r.resp.Body)
	require.NoError(t, err)
	r.resp.Body.Close()
	assert.Equal(t, bytes.Repeat([]byte{'2'}, size), got, "the one with more of its body, byte for byte")
}

// A server's Content-Length bounds nothing of ours: the largest it can
// claim (net/http takes up to 2^63-1) sizes no buffer beyond
// raceBodyBytes, and its bytes arrive as they come.
func TestRaceFirstHostileLength(t *testing.T) {
	url, release := raceServer(t, func(n int, w http.ResponseWriter, body []byte, held <-chan struct{}) {
		w.Header().Set("Content-Length", strconv.FormatInt(math.MaxInt64, 10))
		w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		<-held
	})
	tr, p := raceTransport(t)
	resp, err := raceGet(t, tr, p, url)
	require.NoError(t, err)
	release() // the server ends the body short: the caller reads what came, then an error
	start := make([]byte, 10)
	_, err = io.ReadFull(resp.Body, start)
	require.NoError(t, err)
	assert.Equal(t, "0123456789", string(start))
	_, err = resp.Body.Read(start)
	assert.Error(t, err, "cut short")
	resp.Body.Close()
}
