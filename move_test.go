package intents

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// scriptedMover reuses a free connection or opens one on first, and moves, when asked, to
// whatever to holds.
type scriptedMover struct {
	first *Path
	to    atomic.Pointer[Path]
	// on, if set, is where requests go instead of first, reusing only a
	// free connection there (or on the path a moved request requires).
	on    atomic.Pointer[Path]
	mu    sync.Mutex
	asked []string // "SIZE from PATH" per Move
}

func (s *scriptedMover) Decide(req *Request, d *Decision) {
	on := s.on.Load()
	if on != nil && !slices.Contains(req.Paths, on) {
		on = req.Paths[0]
	}
	for i := range req.Candidates {
		if req.Candidates[i].Available > 0 && (on == nil || req.Candidates[i].Path == on) {
			d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
		}
	}
	d.Choices = append(d.Choices, Choice{Path: cmp.Or(on, s.first)})
	d.Reason = "scripted"
}

func (s *scriptedMover) Move(req *Request, from *Candidate) (*Path, string) {
	s.mu.Lock()
	s.asked = append(s.asked, strconv.FormatInt(req.Intents.SizeToBeReceived, 10)+" from "+from.Path.Name)
	s.mu.Unlock()
	return s.to.Load(), "scripted move"
}

func (s *scriptedMover) moves() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

// movePaths is a Manager over two made-up paths, p1 and p2, with a
// scriptedMover that places on p1 and moves to p2, and a Transport that
// reaches srv whatever the path (the paths exist only in the pool's
// books): requests go to move.test.
func movePaths(t *testing.T, srv *httptest.Server) (*Transport, *scriptedMover, string) {
	t.Helper()
	return movePathsWith(t, srv, func(m *scriptedMover) Policy { return m })
}

// movePathsWith is movePaths with the policy that policy makes of the
// scriptedMover.
func movePathsWith(t *testing.T, srv *httptest.Server, policy func(*scriptedMover) Policy) (*Transport, *scriptedMover, string) {
	t.Helper()
	p1 := &Path{Name: "p1", Up: true, Type: TypeWifi, Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}
	p2 := &Path{Name: "p2", Up: true, Type: TypeCellular, Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}}
	mover := &scriptedMover{first: p1}
	mover.to.Store(p2)
	m := loManager(t, policy(mover))
	paths := []*Path{p1, p2}
	m.paths.Store(&paths)
	tr, base := transportTo(t, m, srv, "move.test")
	return tr, mover, base
}

// transportTo is a Transport with m whose Base dials srv whatever the
// name, and the base URL of srv under the name host: a destination that
// is not a loopback one (that one the OS would route, off every path).
func transportTo(t *testing.T, m *Manager, srv *httptest.Server, host string) (*Transport, string) {
	t.Helper()
	return transportToAddr(t, m, srv.Listener.Addr().String(), host)
}

// transportToAddr is transportTo for a server at addr.
func transportToAddr(t *testing.T, m *Manager, addr, host string) (*Transport, string) {
	t.Helper()
	var d net.Dialer
	base := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	tr := &Transport{Manager: m, Base: base}
	t.Cleanup(func() { tr.Close() })
	_, port, _ := net.SplitHostPort(addr)
	return tr, "http://" + host + ":" + port
}

// firstPartThenWait answers a GET of an object of size bytes, taking byte
// ranges, with its first 64 KiB, then waits until until is closed or the
// client goes away.
func firstPartThenWait(w http.ResponseWriter, r *http.Request, size int, until <-chan struct{}) {
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	io.CopyN(w, testbed.NewObject(int64(size)), 64<<10)
	w.(http.Flusher).Flush()
	select {
	case <-until:
	case <-r.Context().Done():
	}
}

// restByRange serves an object of size bytes (ETag "v1", byte ranges):
// a GET without a Range gets the first 64 KiB and waits; the first with
// one, the rest, which ends the wait. It logs every request.
func restByRange(size int, log *requestLog) http.HandlerFunc {
	rest := make(chan struct{})
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("Range") != "" {
			once.Do(func() { close(rest) })
			http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(int64(size)))
			return
		}
		firstPartThenWait(w, r, size, rest) // the rest comes from the range request
	}
}

// checkEveryRead makes a body's move considered at each Read.
func checkEveryRead(t *testing.T) {
	d := moveCheckInterval
	moveCheckInterval = 0
	t.Cleanup(func() { moveCheckInterval = d })
}

// requestLog is what a test server saw: each request's Range, in order.
type requestLog struct {
	mu  sync.Mutex
	got []string
}

func (l *requestLog) add(r *http.Request) {
	l.mu.Lock()
	l.got = append(l.got, r.URL.Path+" "+r.Header.Get("Range")+" "+r.Header.Get("If-Range"))
	l.mu.Unlock()
}

func (l *requestLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// A response whose headers show it far larger than predicted, and which
// the policy moves, is sent again whole on a new connection on the path
// the policy named, in the old connection's place in the limits: a request
// queued behind it at the host's limit does not take that place first.
func TestMoveAtTheHeaders(t *testing.T) {
	const size = 300_000
	var log requestLog
	arrived, queued := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		if r.URL.Path == "/big" && len(log.all()) == 1 {
			close(arrived)
			<-queued // the other request waits at the limit now
		}
		// No validator, no Accept-Ranges: a move at the headers needs none.
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.Copy(w, io.LimitReader(testbed.NewObject(size), size))
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	tr.MaxConnsPerHost = 1

	var moving []*DecisionInfo
	var queuedOnce sync.Once
	var mu sync.Mutex
	ctx := WithDecisionTrace(context.Background(), func(di DecisionInfo) {
		mu.Lock()
		defer mu.Unlock()
		if di.Moving != nil {
			moving = append(moving, &di)
		}
	})
	otherCtx := WithDecisionTrace(context.Background(), func(di DecisionInfo) {
		queuedOnce.Do(func() { close(queued) }) // decided: at the limit, it waits
	})
	bigDone := make(chan []byte)
	go func() {
		body, _ := get(t, tr, ctx, base+"/big")
		bigDone <- []byte(body)
	}()
	<-arrived // the first request has the host's one connection
	small, _ := get(t, tr, otherCtx, base+"/small")
	big := <-bigDone
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(big), "the whole object, once")
	assert.Len(t, small, size)
	assert.Equal(t, []string{"/big  ", "/big  ", "/small  "}, log.all(), "sent again whole, before the request queued behind it")
	assert.Equal(t, []string{"300000 from p1"}, mover.moves())
	st := tr.Stats()
	assert.EqualValues(t, 1, st["p1"].Moved)
	assert.EqualValues(t, 1, st["p1"].Requests)
	assert.EqualValues(t, 2, st["p2"].Requests, "the moved one, and the one behind it on the same connection")
	require.Len(t, moving, 1)
	assert.EqualValues(t, sizeFromResponse, moving[0].SizeSource)
	assert.Equal(t, mover.first, moving[0].Moving.Path)
	assert.Equal(t, []Choice{{Path: mover.to.Load(), Fresh: true}}, moving[0].Choices)
}

// A response moved at its headers (sent again whole on the path the
// policy named) resumes by range when that path goes down mid-body, as a
// response that did not move does: the caller reads one object, byte for
// byte, and no error.
func TestMovedResponseResumesWhenItsPathGoesDown(t *testing.T) {
	const size, read = 1_000_003, 32 << 10
	var log requestLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("Range") != "" {
			http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
			return
		}
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		obj := testbed.NewObject(size)
		io.CopyN(w, obj, 64<<10)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done(): // moved, or its path gone
		case <-time.After(10 * time.Second): // a test that failed: the body ends, and its assertions say why
			io.Copy(w, obj)
		}
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	req, err := http.NewRequestWithContext(WithIntents(context.Background(), Intents{SizeToBeReceived: 10_000}), "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	h := sha256.New()
	_, err = io.CopyN(h, resp.Body, read)
	require.NoError(t, err)
	p2Down := *mover.to.Load()
	p2Down.Up = false
	tr.Manager.paths.Store(&[]*Path{mover.first, &p2Down})
	tr.core.drainGonePaths()
	_, err = io.Copy(h, resp.Body)
	require.NoError(t, err, "the rest, resumed on p1")
	assert.Equal(t, testbed.ObjectSum(size), [32]byte(h.Sum(nil)), "the whole object, byte for byte")
	got := log.all()
	require.Len(t, got, 3, "%q", got)
	assert.Equal(t, []string{"/obj  ", "/obj  "}, got[:2], "moved whole at the headers")
	// The rest from the byte it reached: what had arrived of the 64 KiB
	// sent is read before the closed connection fails.
	var from int64
	_, err = fmt.Sscanf(got[2], "/obj bytes=%d-1000002 \"v1\"", &from)
	require.NoError(t, err, got[2])
	assert.GreaterOrEqual(t, from, int64(read))
	assert.LessOrEqual(t, from, int64(64<<10))
	st := tr.Stats()
	assert.EqualValues(t, 1, st["p1"].Moved)
	assert.EqualValues(t, 1, st["p2"].Resumed, "counted on the path it broke off on")
}

// A body whose server ends its connection mid-way (HTTP/1.1: closed;
// HTTP/2: GOAWAY, then closed with the stream unfinished, as a server
// restarting with a grace period shorter than the download) asks for its
// rest by range on a new connection, of the same version (If-Range), and
// the caller reads the whole object without an error. Without a validator
// it cannot: over HTTP/2 the body fails with net/http's error, which
// matches io.ErrUnexpectedEOF here, as the HTTP/1.1 one does.
func TestBodyResumesWhenTheServerCutsItsConnection(t *testing.T) {
	const size, read = 1_000_003, 32 << 10
	for _, c := range []struct {
		proto string
		etag  string
	}{{"HTTP/1.1", `"v1"`}, {"HTTP/2.0", `"v1"`}, {"HTTP/2.0", ""}} {
		t.Run(c.proto+" "+c.etag, func(t *testing.T) {
			ours := func(addr string) (http.RoundTripper, string) {
				mover := &scriptedMover{first: &Path{Name: "p1", Up: true, Type: TypeWifi, Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}}
				m := loManager(t, mover)
				m.paths.Store(&[]*Path{mover.first})
				tr, base := transportToAddr(t, m, addr, "cut.test")
				return tr, base
			}
			h, log, tr, err := cutMidBody(t, c.proto, c.etag, size, read, ours)
			if c.etag == "" {
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
				_, _, _, std := cutMidBody(t, c.proto, c.etag, size, read, func(addr string) (http.RoundTripper, string) {
					return &http.Transport{}, "http://" + addr
				})
				assert.EqualError(t, err, std.Error(), "net/http's text")
				assert.Empty(t, log.all(), "the rest cannot be asked for")
				return
			}
			require.NoError(t, err, "the rest, on a new connection")
			assert.Equal(t, testbed.ObjectSum(size), [32]byte(h), "the whole object, byte for byte")
			got := log.all()
			require.Len(t, got, 1, "%q", got)
			var from int64
			_, err = fmt.Sscanf(got[0], "/obj bytes=%d-1000002 \"v1\"", &from)
			require.NoError(t, err, got[0])
			assert.GreaterOrEqual(t, from, int64(read))
			assert.EqualValues(t, 1, tr.(*Transport).Stats()["p1"].Resumed)
		})
	}
}

// cutMidBody GETs an object of size bytes (with ETag etag, if set) over
// the round tripper (and base URL) that transport makes for the server's
// address, reads read bytes, and has the server end the connection: the
// SHA-256 of all the body gave, the requests that a second server,
// answering at the same address from then on, saw, the round tripper and
// the body's error.
func cutMidBody(t *testing.T, proto, etag string, size, read int, transport func(addr string) (http.RoundTripper, string)) (
	sum [32]byte, log *requestLog, rt http.RoundTripper, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	firstLn, restLn := handOff(t, ln)
	var protocols http.Protocols
	protocols.SetHTTP1(proto == "HTTP/1.1")
	protocols.SetUnencryptedHTTP2(proto == "HTTP/2.0")
	first := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		firstPartThenWait(w, r, size, nil) // until the connection closes
	})}
	log = &requestLog{}
	rest := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", etag)
		http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(int64(size)))
	})}
	for _, s := range []struct {
		srv *http.Server
		l   net.Listener
	}{{first, firstLn}, {rest, restLn}} {
		served := make(chan struct{})
		go func() { defer close(served); s.srv.Serve(s.l) }()
		t.Cleanup(func() { s.srv.Close(); <-served })
	}
	rt, base := transport(ln.Addr().String())
	switch rt := rt.(type) {
	case *Transport:
		rt.Base.Protocols = &protocols
	case *http.Transport:
		rt.Protocols = &protocols
		t.Cleanup(rt.CloseIdleConnections)
	}
	req, err := http.NewRequest(http.MethodGet, base+"/obj", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, proto, resp.Proto)
	h := sha256.New()
	_, err = io.CopyN(h, resp.Body, int64(read))
	require.NoError(t, err)
	if proto == "HTTP/1.1" {
		first.Close() // the connection with it, mid-response
	} else {
		// GOAWAY, a grace period the download outlasts, then the
		// connection closed.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_ = first.Shutdown(ctx)
		cancel()
		first.Close()
	}
	_, err = io.Copy(h, resp.Body)
	return [32]byte(h.Sum(nil)), log, rt, err
}

// handOff splits the connections l accepts: the first to one listener,
// the rest to the other, so that two servers answer at one address, as
// one server before and after a restart.
func handOff(t *testing.T, l net.Listener) (first, rest net.Listener) {
	a := &chanListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: l.Addr()}
	b := &chanListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: l.Addr()}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for i := 0; ; i++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			to := b
			if i == 0 {
				to = a
			}
			select {
			case to.conns <- c:
			case <-to.done:
				c.Close()
			}
		}
	}()
	t.Cleanup(func() { l.Close(); <-accepted })
	return a, b
}

// chanListener accepts the connections sent on conns.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return l.addr }

// Mid-way a body moves with a range request for the rest, of the same
// version (If-Range), on the path the policy names; the caller reads one
// object, byte for byte.
func TestMoveMidBody(t *testing.T) {
	checkEveryRead(t)
	const size = 1_000_003
	var log requestLog
	srv := httptest.NewServer(restByRange(size, &log))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	ctx := WithIntents(context.Background(), Intents{SizeToBeReceived: size}) // as predicted: no move at the headers
	body, _ := get(t, tr, ctx, base+"/obj")
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256([]byte(body)), "the whole object, byte for byte")
	got := log.all()
	require.Len(t, got, 2)
	assert.Equal(t, "/obj  ", got[0])
	var from int64
	_, err := fmt.Sscanf(got[1], "/obj bytes=%d-1000002 \"v1\"", &from)
	require.NoError(t, err, got[1])
	assert.Positive(t, from)
	assert.LessOrEqual(t, from, int64(64<<10))
	// Asked once, with what was left to arrive: the rest less what waited
	// in the socket then (on Linux), of the 64 KiB sent before the wait.
	moves := mover.moves()
	require.Len(t, moves, 1, "asked once")
	var asked int64
	_, err = fmt.Sscanf(moves[0], "%d from p1", &asked)
	require.NoError(t, err, moves[0])
	assert.LessOrEqual(t, asked, size-from)
	assert.GreaterOrEqual(t, asked, int64(size-64<<10))
	assert.EqualValues(t, 1, tr.Stats()["p1"].Moved)
}

// A body moves onto a free connection on the path the policy names, where
// there is one (a page's tail: that path is done while this one still
// carries): its rest comes in a round trip, without a connection's set-up.
func TestMoveOntoAFreeConnection(t *testing.T) {
	checkEveryRead(t)
	const size = 1_000_003
	var log requestLog
	obj := restByRange(size, &log)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/warm" {
			obj(w, r)
			return
		}
		log.add(r)
		w.Write([]byte("warm"))
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	p2 := mover.to.Load()
	mover.to.Store(nil)
	mover.on.Store(p2)
	warm, _ := get(t, tr, context.Background(), base+"/warm") // an idle connection on p2
	require.Equal(t, "warm", warm)
	mover.on.Store(mover.first)
	mover.to.Store(p2)
	ctx := WithIntents(context.Background(), Intents{SizeToBeReceived: size})
	body, _ := get(t, tr, ctx, base+"/obj")
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256([]byte(body)), "the whole object, byte for byte")
	got := log.all()
	require.Len(t, got, 3)
	assert.True(t, strings.HasPrefix(got[2], "/obj bytes="), got[2])
	st := tr.Stats()
	assert.EqualValues(t, 1, st["p1"].Moved)
	assert.EqualValues(t, 1, st["p2"].Dials, "the rest went over the free connection: none opened for it")
	assert.EqualValues(t, 2, st["p2"].Requests)
	assert.EqualValues(t, 1, st["p2"].Reuses)
}

// A body that moved is one version or an error: when the object changed
// before its rest was asked for, the read fails with ErrObjectChanged and
// no byte of the new version is handed out.
func TestMoveNeverStitchesTwoVersions(t *testing.T) {
	checkEveryRead(t)
	const size = 200_000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			w.Header().Set("ETag", `"v2"`) // changed: If-Range makes it the whole new version
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(strings.Repeat("x", size)))
			return
		}
		w.Header().Set("ETag", `"v1"`)
		firstPartThenWait(w, r, size, nil) // the client moves away
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	req, err := http.NewRequestWithContext(WithIntents(context.Background(), Intents{SizeToBeReceived: size}), "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.ErrorIs(t, err, ErrObjectChanged)
	assert.Len(t, mover.moves(), 1, "it moved")
	assert.Positive(t, len(got))
	for i, b := range got { // nothing of the second version, all "x"
		if b != testbed.ObjectByte(int64(i)) {
			t.Fatalf("byte %d is not the first version's", i)
		}
	}
}

// Only what can be sent again safely, and fetched again exactly, moves: a
// policy is not even asked about a POST, a request for a range, a response
// other than a whole 200 with a length, or a small body; and mid-way only
// a body with a strong validator from a server that takes byte ranges.
func TestMoveOnlyWhatMay(t *testing.T) {
	checkEveryRead(t)
	const size = 200_000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked": // no length
			w.(http.Flusher).Flush()
		case "/small":
			io.WriteString(w, strings.Repeat("s", 20_000))
			return
		case "/noranges": // a validator, but byte ranges not accepted
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Content-Length", strconv.Itoa(size))
		case "/weak": // byte ranges, but a weak validator
			w.Header().Set("ETag", `W/"v1"`)
			w.Header().Set("Accept-Ranges", "bytes")
			w.Header().Set("Content-Length", strconv.Itoa(size))
		default:
			w.Header().Set("ETag", `"v1"`)
			http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
			return
		}
		io.CopyN(w, testbed.NewObject(size), size)
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	hinted := WithIntents(context.Background(), Intents{SizeToBeReceived: size}) // no move at the headers
	for _, c := range []struct {
		name, method, path, rng string
		ctx                     context.Context
	}{
		{"POST", "POST", "/obj", "", context.Background()},
		{"a range asked for", "GET", "/obj", "bytes=0-", context.Background()},
		{"no Content-Length", "GET", "/chunked", "", context.Background()},
		{"a small body", "GET", "/small", "", context.Background()},
		{"mid-way without byte ranges", "GET", "/noranges", "", hinted},
		{"mid-way with a weak validator", "GET", "/weak", "", hinted},
	} {
		req, err := http.NewRequestWithContext(c.ctx, c.method, base+c.path, nil)
		require.NoError(t, err)
		if c.rng != "" {
			req.Header.Set("Range", c.rng)
		}
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, c.name)
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.NoError(t, err, c.name)
		assert.Empty(t, mover.moves(), c.name)
	}
	assert.Zero(t, tr.Stats()["p1"].Moved)
}

// Close returns promptly, and a Read waiting for the rest of a moving body
// with it, while the request for the rest is unanswered.
func TestMoveCloseWhileMoving(t *testing.T) {
	checkEveryRead(t)
	const size = 200_000
	asked := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			close(asked)
			<-r.Context().Done() // no answer: the client gives up
			return
		}
		w.Header().Set("ETag", `"v1"`)
		firstPartThenWait(w, r, size, nil)
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	req, err := http.NewRequestWithContext(WithIntents(context.Background(), Intents{SizeToBeReceived: size}), "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		read <- err
	}()
	<-asked // the Read is in the move now, waiting for the rest's headers
	require.NoError(t, resp.Body.Close())
	assert.Error(t, <-read, "the Read ends with Close")
	assert.Len(t, mover.moves(), 1)
}

// A length from the server bounds nothing of ours: a policy asked to move
// a response that claims 2^60 bytes weighs at most maxSizeEstimate, as the
// pool's backlog counts it.
func TestMoveBoundsTheServersLength(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(1<<60, 10))
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	req, err := http.NewRequest("GET", base+"/huge", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []string{strconv.FormatInt(maxSizeEstimate, 10) + " from p1"}, mover.moves())
}
