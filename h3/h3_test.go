package h3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/h3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is an origin on loopback: HTTPS over TCP (HTTP/1.1 and HTTP/2)
// from httptest, and HTTP/3 on a UDP port, both with the same
// certificate and handler.
type server struct {
	tcp    *httptest.Server
	udp    net.PacketConn
	h3     *http3.Server
	roots  *x509.CertPool
	altSvc atomic.Pointer[string] // sent on every TCP response, if set
	served chan struct{}
}

// protoHandler answers with the protocol the request came by and where
// from; /echo returns the request body; /obj/N sends N bytes; /hold sends
// 1000 bytes and holds the response open.
func protoHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Proto", r.Proto)
	w.Header().Set("X-Remote", r.RemoteAddr)
	switch {
	case r.URL.Path == "/echo":
		io.Copy(w, r.Body)
	case len(r.URL.Path) > 5 && r.URL.Path[:5] == "/obj/":
		n, _ := strconv.Atoi(r.URL.Path[5:])
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(bytes.Repeat([]byte{'x'}, n))
	case r.URL.Path == "/hold": // 1000 bytes, then nothing until the request ends
		w.Write(bytes.Repeat([]byte{'x'}, 1000))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	default:
		io.WriteString(w, r.Proto)
	}
}

func newServer(t testing.TB, withH3 bool) *server {
	s := &server{served: make(chan struct{})}
	s.tcp = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := s.altSvc.Load(); a != nil {
			w.Header().Set("Alt-Svc", *a)
		}
		protoHandler(w, r)
	}))
	s.tcp.EnableHTTP2 = true
	s.tcp.StartTLS()
	t.Cleanup(s.tcp.Close)
	s.roots = x509.NewCertPool()
	s.roots.AddCert(s.tcp.Certificate())
	if !withH3 {
		close(s.served)
		return s
	}
	var err error
	s.udp, err = net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	s.h3 = &http3.Server{Handler: http.HandlerFunc(protoHandler),
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: s.tcp.TLS.Certificates})}
	go func() {
		defer close(s.served)
		s.h3.Serve(s.udp)
	}()
	t.Cleanup(func() {
		s.h3.Close()
		s.udp.Close()
		<-s.served
	})
	return s
}

// udpPort is the server's HTTP/3 port.
func (s *server) udpPort() int { return s.udp.LocalAddr().(*net.UDPAddr).Port }

// url is the origin's URL with path.
func (s *server) url(path string) string { return s.tcp.URL + path }

// transport is a Transport for s that speaks HTTP/3 where it may, without
// racing TCP (a handshake slowed by a busy machine must not lose to it):
// the race's own test sets a delay.
func (s *server) transport() *intents.Transport {
	return &intents.Transport{
		Base:           &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}, ForceAttemptHTTP2: true},
		HTTP3:          &h3.Dialer{},
		HTTP3RaceDelay: -1,
	}
}

func get(t *testing.T, rt http.RoundTripper, ctx context.Context, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// An origin that advertises h3 at another UDP port of its own host is
// asked over HTTP/3 from the next new connection on, and HTTP/3
// connections are reused.
func TestAltSvcDiscovery(t *testing.T) {
	s := newServer(t, true)
	alt := `h3=":` + strconv.Itoa(s.udpPort()) + `"; ma=60`
	s.altSvc.Store(&alt)
	tr := s.transport()
	defer tr.Close()
	ctx := context.Background()

	resp, _ := get(t, tr, ctx, s.url("/"))
	assert.Equal(t, "HTTP/2.0", resp.Header.Get("X-Proto"), "first over TCP: nothing advertised yet")
	tr.CloseIdleConnections()

	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		reused = append(reused, info.Reused)
		assert.Equal(t, "udp", info.Conn.RemoteAddr().Network())
		assert.Equal(t, strconv.Itoa(s.udpPort()), portOf(info.Conn.RemoteAddr()))
	}}
	tctx := httptrace.WithClientTrace(ctx, trace)
	for range 3 {
		resp, body := get(t, tr, tctx, s.url("/"))
		assert.Equal(t, "HTTP/3.0", string(body))
		assert.Equal(t, 3, resp.ProtoMajor)
	}
	assert.Equal(t, []bool{false, true, true}, reused)
}

func portOf(a net.Addr) string {
	_, port, _ := net.SplitHostPort(a.String())
	return port
}

// HTTP3Always speaks HTTP/3 at once; bodies both ways are byte-exact, and
// many requests at once share connections.
func TestHTTP3AlwaysBodies(t *testing.T) {
	s := newServer(t, true)
	tr := s.transport()
	tr.HTTP3Always = true
	defer tr.Close()
	// The origin's own port, as HTTP3Always tries: the UDP server's.
	origin := "https://127.0.0.1:" + strconv.Itoa(s.udpPort())

	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	req, err := http.NewRequest(http.MethodPost, origin+"/echo", bytes.NewReader(payload))
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "HTTP/3.0", resp.Header.Get("X-Proto"))
	assert.Equal(t, sha256.Sum256(payload), sha256.Sum256(got))

	var wg sync.WaitGroup
	remotes := make(chan string, 20)
	for i := range 20 {
		wg.Go(func() {
			resp, body := get(t, tr, context.Background(), origin+"/obj/"+strconv.Itoa(1000*(i+1)))
			assert.Len(t, body, 1000*(i+1))
			remotes <- resp.Header.Get("X-Remote")
		})
	}
	wg.Wait()
	close(remotes)
	seen := map[string]bool{}
	for r := range remotes {
		seen[r] = true
	}
	assert.Less(t, len(seen), 20, "requests share HTTP/3 connections: %v", seen)
}

// Our Transport gives what quic-go's own http3.Transport gives for the
// same requests: status, protocol, headers the handler set, body.
func TestDifferentialHTTP3Transport(t *testing.T) {
	s := newServer(t, true)
	origin := "https://127.0.0.1:" + strconv.Itoa(s.udpPort())
	ours := s.transport()
	ours.HTTP3Always = true
	defer ours.Close()
	theirs := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}}
	defer theirs.Close()
	for _, path := range []string{"/", "/obj/0", "/obj/70000", "/missing/../obj/5"} {
		r1, b1 := get(t, ours, context.Background(), origin+path)
		r2, b2 := get(t, theirs, context.Background(), origin+path)
		assert.Equal(t, r2.StatusCode, r1.StatusCode, path)
		assert.Equal(t, r2.Proto, r1.Proto, path)
		assert.Equal(t, r2.ContentLength, r1.ContentLength, path)
		assert.Equal(t, r2.Header.Get("X-Proto"), r1.Header.Get("X-Proto"), path)
		assert.Equal(t, r2.Header.Get("Content-Type"), r1.Header.Get("Content-Type"), path)
		assert.Equal(t, b2, b1, path)
	}
}

// A body whose request is cancelled, or whose deadline passes, while it
// waits for bytes fails with the context's error, over HTTP/3 as over
// HTTP/2 with net/http: a caller tells a cancellation by errors.Is.
func TestHTTP3BodyEndsWithContextError(t *testing.T) {
	s := newServer(t, true)
	ours := s.transport()
	ours.HTTP3Always = true
	defer ours.Close()
	std := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}, ForceAttemptHTTP2: true}
	defer std.CloseIdleConnections()
	for _, c := range []struct {
		name   string
		rt     http.RoundTripper
		origin string
		proto  string
	}{{"ours", ours, "https://127.0.0.1:" + strconv.Itoa(s.udpPort()), "HTTP/3.0"}, {"net/http", std, s.url(""), "HTTP/2.0"}} {
		for _, want := range []error{context.Canceled, context.DeadlineExceeded} {
			t.Run(c.name+"/"+want.Error(), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				if want == context.DeadlineExceeded {
					ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
				}
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.origin+"/hold", nil)
				require.NoError(t, err)
				resp, err := c.rt.RoundTrip(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				assert.Equal(t, c.proto, resp.Proto)
				_, err = io.ReadFull(resp.Body, make([]byte, 1000))
				require.NoError(t, err)
				if want == context.Canceled {
					cancel()
				}
				_, err = resp.Body.Read(make([]byte, 10)) // returns once the context ends
				assert.ErrorIs(t, err, want)
			})
		}
	}
}

// A body whose connection ends before the body's end fails with an error
// that matches io.ErrUnexpectedEOF, as over TCP, so that the Transport
// asks for the rest where it can: the server closes it (a restart), or
// goes silent for the idle timeout (its socket closed).
func TestHTTP3BodyCutByTheServer(t *testing.T) {
	for _, how := range []string{"closed", "silent"} {
		t.Run(how, func(t *testing.T) {
			s := newServer(t, true)
			tr := s.transport()
			tr.HTTP3Always = true
			tr.HTTP3.(*h3.Dialer).QUICConfig = &quic.Config{MaxIdleTimeout: 300 * time.Millisecond}
			defer tr.Close()
			req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(s.udpPort())+"/hold", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, "HTTP/3.0", resp.Proto)
			_, err = io.ReadFull(resp.Body, make([]byte, 1000))
			require.NoError(t, err)
			if how == "closed" {
				require.NoError(t, s.h3.Close())
			} else {
				require.NoError(t, s.udp.Close())
			}
			_, err = io.ReadAll(resp.Body)
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			var appErr *quic.ApplicationError
			var idle *quic.IdleTimeoutError
			if how == "closed" {
				require.ErrorAs(t, err, &appErr, "quic-go's error, as it was")
				assert.True(t, appErr.Remote)
			} else {
				require.ErrorAs(t, err, &idle, "quic-go's error, as it was")
			}
		})
	}
}

// blackhole is a UDP socket that reads and counts datagrams and answers
// none, or answers each with garbage.
type blackhole struct {
	pc       net.PacketConn
	received atomic.Int64
	done     chan struct{}
}

func newBlackhole(t *testing.T, addr string, garbage bool) *blackhole {
	pc, err := net.ListenPacket("udp", addr)
	require.NoError(t, err)
	b := &blackhole{pc: pc, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			b.received.Add(1)
			if garbage {
				for i := range buf[:n] {
					buf[i] ^= 0x5a
				}
				pc.WriteTo(buf[:n], from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-b.done
	})
	return b
}

// UDP that goes unanswered loses to TCP, raced after HTTP3RaceDelay; the
// origin is then left on TCP: its next new connection sends no datagram.
func TestFallbackToTCPWhenUDPBlocked(t *testing.T) {
	s := newServer(t, false)
	_, port, _ := net.SplitHostPort(s.tcp.Listener.Addr().String())
	hole := newBlackhole(t, "127.0.0.1:"+port, false) // the origin's UDP port: silent
	tr := s.transport()
	tr.HTTP3Always = true
	tr.HTTP3RaceDelay = 50 * time.Millisecond
	defer tr.Close()
	resp, body := get(t, tr, context.Background(), s.url("/"))
	assert.Equal(t, "HTTP/2.0", string(body))
	assert.Equal(t, 2, resp.ProtoMajor)
	sent := hole.received.Load()
	assert.Positive(t, sent, "HTTP/3 was tried first")

	tr.CloseIdleConnections()
	_, body = get(t, tr, context.Background(), s.url("/"))
	assert.Equal(t, "HTTP/2.0", string(body))
	assert.Equal(t, sent, hole.received.Load(), "HTTP/3 marked broken: not tried again")
}

// A server that answers with garbage, or not at all, ends an HTTP/3-only
// request (no TCP race) with an error by the context's deadline, not a
// hang.
func TestStalledHandshakeEndsWithContext(t *testing.T) {
	for _, garbage := range []bool{false, true} {
		hole := newBlackhole(t, "127.0.0.1:0", garbage)
		tr := &intents.Transport{HTTP3: &h3.Dialer{}, HTTP3Always: true, HTTP3RaceDelay: -1}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+hole.pc.LocalAddr().String()+"/", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		cancel()
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "garbage %v", garbage)
		assert.Positive(t, hole.received.Load())
		tr.Close()
	}
}

// Alt-Svc headers that RFC 7838 does not allow us to follow, or that do
// not parse, are not followed: no datagram leaves for them.
func TestAltSvcNotFollowed(t *testing.T) {
	hole := newBlackhole(t, "127.0.0.1:0", false)
	port := portOf(hole.pc.LocalAddr())
	for _, alt := range []string{
		`h3="other.example:` + port + `"`, // another host
		`h3="127.0.0.2:` + port + `"`,     // another address
		`h3=":` + port + `"; ma=0`,        // expired at once
		`h3=":` + port,                    // unterminated
		`h3=":0"`,                         // no port
		`h3=":99999"`,                     // no port
		`h3=":-1"`,
		`h2=":` + port + `"`, // not HTTP/3
		`h3=":` + port + `"; ma=junk`,
		`h3 = ":` + port + `"`,
		`;;;,,,`,
		"h3=\":" + port + "\"\x00",
	} {
		s := newServer(t, false)
		s.altSvc.Store(&alt)
		tr := s.transport()
		for range 2 {
			_, body := get(t, tr, context.Background(), s.url("/"))
			assert.Equal(t, "HTTP/2.0", string(body), alt)
			tr.CloseIdleConnections()
		}
		tr.Close()
	}
	assert.Zero(t, hole.received.Load())
}
