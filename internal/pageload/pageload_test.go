package pageload

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	w, err := Parse("32x100KB", 1)
	require.NoError(t, err)
	assert.Equal(t, "32×100KB", w.Name)
	assert.Len(t, w.Objects, 33, "root and 32 objects")
	assert.EqualValues(t, RootSize+32*100_000, w.Bytes())
	assert.Equal(t, 2, w.Levels())
	assert.Equal(t, 1, w.Hosts())

	w, err = Parse("8x1MB", 3)
	require.NoError(t, err)
	assert.Equal(t, 3, w.Hosts(), "spread over three servers")
	assert.EqualValues(t, RootSize+8e6, w.Bytes())

	m1, err := Parse("mixed1", 1)
	require.NoError(t, err)
	assert.Len(t, m1.Objects, 1+16+8+4)
	assert.EqualValues(t, RootSize+16e3+8*10e3+4*100e3, m1.Bytes())
	m2, err := Parse("mixed2", 1)
	require.NoError(t, err)
	assert.EqualValues(t, RootSize+32e3+16*10e3+2*100e3+2*200e3, m2.Bytes())

	for _, bad := range []string{"", "x100KB", "0x1KB", "4x", "4xlots", "mixed3", "missing.har"} {
		_, err := Parse(bad, 1)
		assert.Error(t, err, "%q", bad)
	}
	assert.Equal(t, "100KB", FormatSize(100_000))
	assert.Equal(t, "1MB", FormatSize(1_000_000))
	assert.Equal(t, "1500B", FormatSize(1500))
}

func TestLowerBound(t *testing.T) {
	// Handcrafted pages: handshake, root request, object requests, and all
	// bytes at the summed rate.
	w := Uniform(32, 100_000, 1)
	rtt, rate := 50*time.Millisecond, 11e6
	want := 3*rtt + time.Duration(float64(w.Bytes())*8/rate*float64(time.Second))
	assert.InDelta(t, want, w.LowerBound(rtt, rate), float64(time.Microsecond))
	// A chain of requests: its round trips dominate.
	chain := Workload{Objects: []Object{{Size: 0}, {Size: 0, Deps: []int{0}}, {Size: 0, Deps: []int{1}}}}
	assert.Equal(t, 4*rtt, chain.LowerBound(rtt, rate), "handshake and three requests in turn")
	// Independent objects: one request round trip.
	flat := Workload{Objects: []Object{{Size: 1000}, {Size: 1000}}}
	assert.InDelta(t, 2*rtt+time.Duration(16000/rate*float64(time.Second)), flat.LowerBound(rtt, rate), float64(time.Microsecond))
}

func TestReadHAR(t *testing.T) {
	w, err := Parse("testdata/news.har", 1)
	require.NoError(t, err)
	assert.Equal(t, "news", w.Name)
	require.Len(t, w.Objects, 11, "13 entries less the POST beacon and the unanswered tracker")
	assert.Equal(t, 3, w.Hosts(), "www, static and ads")
	assert.EqualValues(t, 62_000, w.Objects[0].Size, "the transferred body size, not the decoded one")
	assert.EqualValues(t, 36_000, w.Objects[10].Size)
	assert.Empty(t, w.Objects[0].Deps)
	// main.css starts after the HTML finished: it waits for it alone.
	assert.Equal(t, []int{0}, waitsFor(w, 1))
	// The images start after main.css (ended 225 ms) and fonts.css (216 ms)
	// but before bundle.js ended (250 ms).
	assert.Equal(t, []int{0, 1, 3}, waitsFor(w, 4))
	// The ad script starts at 255 ms: after bundle.js too.
	assert.Equal(t, []int{0, 1, 2, 3}, waitsFor(w, 9))
	assert.Equal(t, 4, w.Levels(), "HTML, CSS, JS-started script, its creative")

	s, err := ReadHARFile("testdata/search.har")
	require.NoError(t, err)
	assert.Equal(t, 5, s.Levels(), "a chain: every request after the previous one")
	b, err := ReadHARFile("testdata/blog.har")
	require.NoError(t, err)
	assert.Equal(t, 2, b.Levels())
	assert.Equal(t, 1, b.Hosts())

	for name, doc := range map[string]string{
		"not JSON":   `{"log": `,
		"no entries": `{"log": {"version": "1.2", "entries": []}}`,
		"bad URL":    `{"log": {"entries": [{"startedDateTime": "2026-11-30T09:00:00Z", "time": 5, "request": {"method": "GET", "url": "/relative"}, "response": {"status": 200, "bodySize": 5}}]}}`,
		"no start":   `{"log": {"entries": [{"time": 5, "request": {"method": "GET", "url": "http://a.example/"}, "response": {"status": 200, "bodySize": 5}}]}}`,
	} {
		_, err := ReadHAR(strings.NewReader(doc), name)
		assert.Error(t, err, name)
	}
}

// objectServer serves /obj/N with N bytes and counts the requests in
// flight. Until limit requests are in flight at once, each one waits:
// a loader that allows fewer hangs (and fails by its deadline), one that
// allows more shows in most.
type objectServer struct {
	*httptest.Server
	mu       sync.Mutex
	inFlight int
	most     int
	limit    int
	full     chan struct{} // closed once limit requests were in flight
	served   []string
}

func newObjectServer(t *testing.T, limit int) *objectServer {
	s := &objectServer{limit: limit, full: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/obj/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		s.inFlight++
		s.most = max(s.most, s.inFlight)
		s.served = append(s.served, r.URL.RawQuery)
		if s.inFlight == s.limit {
			select {
			case <-s.full: // full once before: in flight can reach the limit again
			default:
				close(s.full)
			}
		}
		s.mu.Unlock()
		if r.URL.RawQuery != "0" { // the root comes alone
			select {
			case <-s.full:
			case <-r.Context().Done():
			}
		}
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
		w.Write(make([]byte, n))
	}))
	t.Cleanup(s.Close)
	return s
}

func TestLoadOrderAndLimits(t *testing.T) {
	// Two servers, 3 requests at once per server allowed, 5 in all: the
	// root first, then 12 objects, 6 per server.
	// In page order objects 1, 3, 5 go to a and 2, 4 to b.
	a, b := newObjectServer(t, 3), newObjectServer(t, 2)
	servers := []*objectServer{a, b}
	w := Uniform(12, 5_000, 2)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	l := &Loader{Transport: tr, MaxPerHost: 3, MaxTotal: 5,
		URL: func(host int, size int64, i int) string {
			return fmt.Sprintf("%s/obj/%d?%d", servers[host].URL, size, i)
		},
		PathOf: func(c net.Conn) string { return "lo" }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := l.Load(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, w.Bytes(), res.Bytes)
	assert.LessOrEqual(t, a.most, 3, "per-host limit")
	assert.LessOrEqual(t, a.most+b.most, 5, "total limit")
	assert.Equal(t, map[string]int{"lo": 13}, res.PathCounts())
	root := res.Objects[0]
	for i, o := range res.Objects[1:] {
		assert.GreaterOrEqual(t, o.Start, root.End, "object %d started after the root arrived", i+1)
		assert.LessOrEqual(t, o.End, res.PLT)
	}
	assert.Equal(t, "0", a.served[0], "root first")
}

func TestLoadErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.RawQuery, "=3") {
			http.Error(w, "gone", http.StatusNotFound)
			return
		}
		w.Write(make([]byte, 100)) // whatever size was asked
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	l := &Loader{Transport: tr, URL: func(_ int, size int64, i int) string {
		return fmt.Sprintf("%s/obj/%d?o=%d", srv.URL, size, i)
	}}
	w := Mixed("short", 1, Part{4, 100})
	w.Objects[0].Size = 100
	_, err := l.Load(context.Background(), w)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404", "object 3's status")

	w.Objects[2].Size = 200
	_, err = l.Load(context.Background(), Workload{Name: "sizes", Objects: w.Objects[:3]})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "100 bytes, want 200")

	_, err = l.Load(context.Background(), Workload{Name: "cycle", Objects: []Object{{Size: 1, Deps: []int{0}}}})
	assert.Error(t, err, "a dependency on itself")
}
