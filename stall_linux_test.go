package intents

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// stallServer serves testbed objects by range; the first request for
// /obj stalls as a connection waiting out a retransmission timeout does:
// after the headers and half the body (body true) or before anything,
// until the test ends.
func stallServer(t *testing.T, size int, body bool) (*httptest.Server, *requestLog) {
	var log requestLog
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", `"v1"`)
		if len(log.all()) == 1 {
			if body {
				w.Header().Set("Accept-Ranges", "bytes")
				w.Header().Set("Content-Length", strconv.Itoa(size))
				io.CopyN(w, testbed.NewObject(int64(size)), int64(size/2))
				w.(http.Flusher).Flush()
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(int64(size)))
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv, &log
}

// stallTransport is a Transport whose connections to srv, named
// stall.test in the returned base URL, are on the loopback interface,
// which the Manager takes for a Wi-Fi (a loopback destination would be
// routed by the OS, off every path, and a loopback path reaches no
// other), and whose Manager's debug log goes to the returned channel.
func stallTransport(t *testing.T, srv *httptest.Server) (*Transport, string, DebugLog) {
	log := make(DebugLog, 64)
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: loopbackName(t)}}, NoWatch: true, Logger: slog.New(log)})
	require.NoError(t, err)
	lo := *m.Paths()[0]
	lo.Type = TypeWifi
	paths := []*Path{&lo}
	m.paths.Store(&paths)
	tr, base := transportTo(t, m, srv, "stall.test")
	return tr, base, log
}

// A body that stops mid-way while its path answers a probe resumes, by
// range, on a new connection: the caller gets every byte, once.
func TestStalledBodyResumes(t *testing.T) {
	const size = 64 << 10
	srv, log := stallServer(t, size, true)
	tr, base, _ := stallTransport(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the rest never came")
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(body))
	// The reader had taken the first half: a connection is quiet only
	// once nothing waits unread in its socket.
	assert.Equal(t, []string{"/obj  ", `/obj bytes=32768-65535 "v1"`}, log.all(), "the rest, of the same version")
	st := tr.Stats()
	assert.EqualValues(t, 1, st[loopbackName(t)].Resumed, "counted once, on the path it broke off on: %+v", st)
}

// A request whose answer does not begin, or whose body cannot resume by
// range, waits for its server however quiet its connection: a server that
// has not answered may be thinking, and sending a GET again is not free
// of cost even where it is safe; a POST is not safe to send again. It is
// sent once, and gets its answer when the server gives it.
func TestStalledWithoutRangeWaits(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		half         bool // the headers and half the body first, without Accept-Ranges
	}{{"GET", "GET", false}, {"POST", "POST", false}, {"GET without ranges", "GET", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 10 << 10
			var log requestLog
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				log.add(r)
				obj := testbed.NewObject(size)
				if tc.half {
					w.Header().Set("Content-Length", strconv.Itoa(size))
					io.CopyN(w, obj, size/2)
					w.(http.Flusher).Flush()
				}
				select {
				case <-release:
					io.Copy(w, obj)
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(srv.Close) // after the Transport's: its connections closed, no handler waits
			tr, base, events := stallTransport(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var body io.Reader
			if tc.method == "POST" {
				body = strings.NewReader("x")
			}
			req, err := http.NewRequestWithContext(ctx, tc.method, base+"/obj", body)
			require.NoError(t, err)
			type result struct {
				body []byte
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				done <- result{b, err}
			}()
			events.Await(t, "intents: quiet connection, path probed")
			close(release)
			r := <-done
			require.NoError(t, r.err)
			assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(r.body))
			assert.Equal(t, []string{"/obj  "}, log.all(), "sent once")
		})
	}
}

// Only an HTTP/1 connection is closed for its stalled body: one carries
// nothing else until the body ends, where an HTTP/2 one may carry other
// streams, or be left with one once this body has ended, which closing
// it would fail.
func TestStalledOnlyOnHTTP1(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			const size = 64 << 10
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"v1"`)
				http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
			}))
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			t.Cleanup(srv.Close)
			tr, base, _ := stallTransport(t, srv)
			tls := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
			tls.ServerName = "example.com" // the test certificate's name
			tr.Base.TLSClientConfig, tr.Base.ForceAttemptHTTP2 = tls, true
			req, err := http.NewRequest("GET", strings.Replace(base, "http:", "https:", 1)+"/obj", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, map[bool]int{false: 1, true: 2}[h2], resp.ProtoMajor)
			_, resumes := resp.Body.(*resumingBody)
			assert.True(t, resumes, "the body resumes by range if its path goes down, on either protocol")
			var resumable []bool
			tr.core.mu.Lock()
			for _, es := range tr.core.reg.entries {
				for _, e := range es {
					resumable = append(resumable, e.fate.resumable.Load())
				}
			}
			tr.core.mu.Unlock()
			assert.Equal(t, []bool{!h2}, resumable, "closed for a stall on HTTP/1 only")
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(body))
		})
	}
}
