package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// tlsProxy is a testProxy that also serves HTTPS proxy clients at tlsAddr,
// with a certificate of ca.
type tlsProxy struct {
	*testProxy
	tlsAddr string
	ca      *testbed.CA
}

func newTLSProxy(t *testing.T, configure func(*Server)) *tlsProxy {
	t.Helper()
	p := newTestProxy(t, intents.Intents{}, configure)
	ca, err := testbed.NewCA()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		served <- p.ServeTLS(l, &tls.Config{Certificates: []tls.Certificate{ca.Cert}}, intents.Intents{})
	}()
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		assert.ErrorIs(t, <-served, ErrServerClosed)
	})
	return &tlsProxy{testProxy: p, tlsAddr: l.Addr().String(), ca: ca}
}

// h2Conn is an HTTP/2 connection to the proxy, as a browser keeps to an
// HTTPS proxy: every request on it, an http URL's origin in :authority.
func (p *tlsProxy) h2Conn(t *testing.T) *http2.ClientConn {
	t.Helper()
	d := tls.Dialer{Config: &tls.Config{RootCAs: p.ca.Pool, ServerName: "localhost", NextProtos: []string{"h2"}}}
	c, err := d.DialContext(t.Context(), "tcp", p.tlsAddr)
	require.NoError(t, err)
	require.Equal(t, "h2", c.(*tls.Conn).ConnectionState().NegotiatedProtocol, "the proxy chooses HTTP/2")
	cc, err := (&http2.Transport{}).NewClientConn(c)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// tunnelSetup is a tlsProxy that may tunnel to target, an echo server
// (conns, if set, gets its connections instead), and an HTTP/2
// connection to the proxy.
func tunnelSetup(t *testing.T, conns chan<- net.Conn) (p *tlsProxy, cc *http2.ClientConn, target string) {
	t.Helper()
	target = echoServer(t, conns)
	_, portText, _ := net.SplitHostPort(target)
	portNum, _ := strconv.Atoi(portText)
	p = newTLSProxy(t, func(s *Server) { s.AnyPort, s.Ports = false, []uint16{uint16(portNum)} })
	return p, p.h2Conn(t), target
}

// openTunnel opens a tunnel on an HTTP/2 stream to a server that does
// nothing by itself: the client's writer and response, and the server's
// end of the tunnel, all closed when the test ends.
func openTunnel(t *testing.T) (p *tlsProxy, pw *io.PipeWriter, resp *http.Response, up net.Conn) {
	t.Helper()
	conns := make(chan net.Conn, 1)
	p, cc, target := tunnelSetup(t, conns)
	pw, resp, err := connectStream(t.Context(), t, cc, target)
	require.NoError(t, err)
	up = <-conns
	t.Cleanup(func() {
		pw.Close()
		resp.Body.Close()
		up.Close()
	})
	return p, pw, resp, up
}

// waitTunnelsEnded waits until n tunnels have ended (to the system's
// routes: loopback) and returns the metrics then.
func (p *tlsProxy) waitTunnelsEnded(t *testing.T, n int, msg string) string {
	t.Helper()
	var metrics strings.Builder
	require.Eventually(t, func() bool {
		metrics.Reset()
		p.Metrics(&metrics)
		return strings.Contains(metrics.String(), fmt.Sprintf(`intents_proxy_tunnels_total{path="system"} %d`, n))
	}, 10*time.Second, 10*time.Millisecond, msg)
	return metrics.String()
}

// connectStream opens a tunnel to target on an HTTP/2 stream: what is
// written to the returned writer goes to target, the response's body is
// what comes back.
func connectStream(ctx context.Context, t *testing.T, cc *http2.ClientConn, target string) (*io.PipeWriter, *http.Response, error) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodConnect, "http://"+target, pr)
	require.NoError(t, err)
	req.URL = &url.URL{Host: target}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		pw.Close()
	}
	return pw, resp, err
}

// Over HTTP/2 a proxy request's origin comes in :authority: all of a
// page's requests go on one connection, each forwarded byte for byte with
// Via "2", and a refusal answers its own stream without ending the
// connection's others.
func TestHTTP2ProxyRequests(t *testing.T) {
	objects := make([][]byte, 16)
	for i := range objects {
		objects[i] = randomBytes(t, 64<<10+i)
	}
	var via sync.Map
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		via.Store(r.Header.Get("Via"), true)
		w.Write(objects[i])
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	upPort, _ := strconv.Atoi(u.Port())
	p := newTLSProxy(t, func(s *Server) {
		s.PathHeader = "Intents-Path"
		s.AnyPort, s.Ports = false, []uint16{uint16(upPort)}
	})
	cc := p.h2Conn(t)

	var wg sync.WaitGroup
	for i := range objects {
		wg.Go(func() {
			resp, err := cc.RoundTrip(httptest.NewRequest("GET", fmt.Sprintf("%s/%d", upstream.URL, i), nil).WithContext(t.Context()))
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			assert.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, sha256.Sum256(objects[i]), sha256.Sum256(body), "object %d", i)
			assert.Equal(t, "system", resp.Header.Get("Intents-Path"), "a loopback destination: routed by the system")
		})
	}
	wg.Wait()
	got := map[any]bool{}
	via.Range(func(k, _ any) bool { got[k] = true; return true })
	assert.Equal(t, map[any]bool{"2 intents-proxy": true}, got)

	// A tunnel to a port not allowed is refused on its stream alone.
	_, resp, err := connectStream(t.Context(), t, cc, "127.0.0.1:25")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, err = cc.RoundTrip(httptest.NewRequest("GET", upstream.URL+"/0", nil).WithContext(t.Context()))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// A request for the proxy itself is no proxy request.
	resp, err = cc.RoundTrip(httptest.NewRequest("GET", "http://"+p.tlsAddr+"/x", nil).WithContext(t.Context()))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// echoServer echoes each connection until its client's end, then closes
// it. conns gets each accepted connection.
func echoServer(t *testing.T, conns chan<- net.Conn) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if conns != nil {
				conns <- c
				continue
			}
			wg.Go(func() {
				defer c.Close()
				io.Copy(c, c)
			})
		}
	})
	return l.Addr().String()
}

// CONNECT on an HTTP/2 stream is a tunnel: byte-exact both ways, the
// client's end of its half passed on, the upstream's end ending the
// stream, and both directions counted.
func TestHTTP2ConnectTunnel(t *testing.T) {
	p, cc, target := tunnelSetup(t, nil)

	data := randomBytes(t, 1<<20)
	pw, resp, err := connectStream(t.Context(), t, cc, target)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	go func() {
		pw.Write(data)
		pw.Close() // the client's half ends: the echo server then closes
	}()
	back, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the upstream's orderly end ends the stream")
	assert.Equal(t, sha256.Sum256(data), sha256.Sum256(back))

	metrics := p.waitTunnelsEnded(t, 1, "the tunnel counted once ended")
	assert.Contains(t, metrics, fmt.Sprintf(`intents_proxy_tunnel_received_bytes_total{path="system"} %d`, len(data)))
	assert.Contains(t, metrics, fmt.Sprintf(`intents_proxy_tunnel_sent_bytes_total{path="system"} %d`, len(data)))
}

// An upstream that resets its connection resets the tunnel's stream: the
// client sees an error, never an orderly end it could take for the whole.
func TestHTTP2TunnelResetIsPassedOn(t *testing.T) {
	_, _, resp, up := openTunnel(t)
	_, err := up.Write([]byte("partial"))
	require.NoError(t, err)
	up.(*net.TCPConn).SetLinger(0)
	up.Close()
	got, err := io.ReadAll(resp.Body)
	assert.Error(t, err, "a reset upstream resets the stream")
	assert.Equal(t, "partial", string(got))
}

// A client that resets its stream (a browser cancelling) ends the
// tunnel at once, its upstream connection included, even while the
// upstream stays silent and keeps its side open.
func TestHTTP2ClientGoneEndsTheTunnel(t *testing.T) {
	p, _, resp, up := openTunnel(t)
	resp.Body.Close() // before the stream's end: a reset (RST_STREAM)
	p.waitTunnelsEnded(t, 1, "the tunnel ends with its stream")
	up.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := up.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
}

// Close ends the tunnels on HTTP/2 streams too, and returns.
func TestHTTP2CloseEndsTunnels(t *testing.T) {
	p, _, resp, up := openTunnel(t)
	require.NoError(t, p.Close())
	up.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := up.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the upstream connection ends (not the 10 s deadline)")
	_, err = io.ReadAll(resp.Body)
	assert.Error(t, err)
}

// A client without HTTP/2 is served HTTP/1.1 over TLS: net/http with an
// https proxy URL, plain requests and tunnels.
func TestHTTPSProxyHTTP1(t *testing.T) {
	object := randomBytes(t, 200<<10)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Via", r.Header.Get("Via"))
		w.Write(object)
	}))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(object) }))
	defer secure.Close()
	u, _ := url.Parse(secure.URL)
	portNum, _ := strconv.Atoi(u.Port())
	u, _ = url.Parse(plain.URL)
	plainPort, _ := strconv.Atoi(u.Port())
	p := newTLSProxy(t, func(s *Server) { s.AnyPort, s.Ports = false, []uint16{uint16(portNum), uint16(plainPort)} })
	roots := p.ca.Pool.Clone() // the proxy's certificate and the server's
	roots.AddCert(secure.Certificate())
	tlsConf := &tls.Config{RootCAs: roots}
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "https", Host: p.tlsAddr}), TLSClientConfig: tlsConf}
	defer tr.CloseIdleConnections()
	for _, target := range []string{plain.URL, secure.URL} {
		resp, err := (&http.Client{Transport: tr}).Get(target)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, sha256.Sum256(object), sha256.Sum256(body), target)
		if target == plain.URL {
			assert.Equal(t, "1.1 intents-proxy", resp.Header.Get("X-Via"))
		}
	}
}

// ServeTLS without a certificate is an error, not a listener that fails
// every handshake.
func TestServeTLSNeedsACertificate(t *testing.T) {
	s := &Server{}
	defer s.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	assert.Error(t, s.ServeTLS(l, &tls.Config{}, intents.Intents{}))
	_, err = net.Dial("tcp", l.Addr().String())
	assert.Error(t, err, "the listener is closed")
}

// An HTTP/2 client that stops halfway through a header block is closed
// after the header timeout and an unanswered ping, not left to hold its
// connection until the idle timeout.
func TestHTTP2HalfHeaderBlockIsClosed(t *testing.T) {
	p := newTLSProxy(t, func(s *Server) { s.ReadHeaderTimeout = 200 * time.Millisecond })
	c, fr := p.rawH2(t)
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: false}))
	closedBy(t, c, fr)
}

// The PAC file names each listener by its kind: HTTPS for a TLS
// listener (the one it came from, or a route's), SOCKS5 for a SOCKS5
// one, PROXY for plain HTTP.
func TestPACNamesEachListenersKind(t *testing.T) {
	ca, err := testbed.NewCA()
	require.NoError(t, err)
	var ls [3]net.Listener // plain HTTP, SOCKS5, HTTPS
	for i := range ls {
		ls[i], err = net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
	}
	plain, socks, secure := ls[0].Addr().String(), ls[1].Addr().String(), ls[2].Addr().String()
	s := &Server{PAC: []PACRoute{{Host: "a.example", Proxy: socks}, {Host: "b.example", Proxy: plain}}}
	served := make(chan error, len(ls))
	go func() { served <- s.Serve(ls[0], intents.Intents{}) }()
	go func() { served <- s.ServeSOCKS(ls[1], intents.Intents{}) }()
	go func() {
		served <- s.ServeTLS(ls[2], &tls.Config{Certificates: []tls.Certificate{ca.Cert}}, intents.Intents{})
	}()
	defer func() {
		s.Close()
		for range ls {
			<-served
		}
	}()
	require.Eventually(t, func() bool { return s.listenerKind(socks) == pacSOCKS }, 10*time.Second, time.Millisecond,
		"the SOCKS5 listener serves")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + secure + PACPath)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, `function FindProxyForURL(url, host) {
	if (host.toLowerCase() == "a.example") return "SOCKS5 `+socks+`";
	if (host.toLowerCase() == "b.example") return "PROXY `+plain+`";
	return "HTTPS `+secure+`";
}
`, string(body))
}

// Over HTTP/2 a request's :scheme says how to reach its origin: https is
// fetched over TLS, never in the clear, and http as it was.
func TestHTTP2SchemeIsKept(t *testing.T) {
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls=%t", r.TLS != nil)
	}))
	defer secure.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls=%t", r.TLS != nil)
	}))
	defer plain.Close()
	p := newTLSProxy(t, func(s *Server) {
		s.Transport.Base = &http.Transport{TLSClientConfig: secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone()}
	})
	cc := p.h2Conn(t)
	for target, want := range map[string]string{secure.URL: "tls=true", plain.URL: "tls=false"} {
		for range 2 { // the second with the fields indexed by the decoder
			resp, err := cc.RoundTrip(httptest.NewRequest("GET", target+"/x", nil).WithContext(t.Context()))
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", target, body)
			assert.Equal(t, want, string(body), target)
		}
	}
}

// A request is told its own scheme even among others alike; one that
// cannot be told (two alike but for their schemes) is told none.
func TestSchemeLookup(t *testing.T) {
	c := &schemeConn{pending: []h2Request{
		{"GET", "https", "a.example", "/"},
		{"GET", "http", "b.example", "/"},
		{"GET", "https", "b.example", "/x"},
		{"GET", "http", "b.example", "/x"},
	}}
	req := func(host, path string) *http.Request {
		r := httptest.NewRequest("GET", path, nil)
		r.Host, r.RequestURI = host, path
		return r
	}
	assert.Equal(t, "https", c.scheme(req("a.example", "/")))
	assert.Equal(t, "", c.scheme(req("a.example", "/")), "each request is looked up once")
	assert.Equal(t, "http", c.scheme(req("b.example", "/")))
	assert.Equal(t, "", c.scheme(req("b.example", "/x")), "alike but for the scheme")
}

// rawH2 is a client's HTTP/2 connection to p's TLS listener, its preface
// and settings sent, framed by hand.
func (p *tlsProxy) rawH2(t *testing.T) (*tls.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.Dial("tcp", p.tlsAddr, &tls.Config{RootCAs: p.ca.Pool, NextProtos: []string{"h2"}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	require.NoError(t, fr.WriteSettings())
	return c, fr
}

// getBlock is the header block of a GET for target through the proxy.
func getBlock(target string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", target}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return b.Bytes()
}

// closedBy reads frames until the proxy ends the connection: a GOAWAY or
// the connection closed. It fails if the connection is still open at the
// read deadline (a guard against a hang, far past the proxy's timeouts).
func closedBy(t *testing.T, c *tls.Conn, fr *http2.Framer) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			assert.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection stayed open: %v", err)
			return
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			return
		}
	}
}

// A header block strung out over empty CONTINUATION frames, and streams
// opened and reset at once by the thousand, close the client's
// connection (the header timeout set far beyond the test: the flood, not
// the timeout, closes it); a client that resets a page's worth of
// streams is still answered on the same connection.
func TestHTTP2FloodsAreClosed(t *testing.T) {
	p := newTLSProxy(t, func(s *Server) { s.ReadHeaderTimeout, s.IdleTimeout = time.Hour, time.Hour })
	t.Run("continuation", func(t *testing.T) {
		c, fr := p.rawH2(t)
		require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: getBlock("127.0.0.1:1")[:1]}))
		go func() {
			for range 10 * maxBlockFrames {
				if fr.WriteContinuation(1, false, nil) != nil {
					return // closed
				}
			}
		}()
		closedBy(t, c, fr)
	})
	reset := func(fr *http2.Framer, streams int) {
		block := getBlock("127.0.0.1:1")
		for i := range streams {
			id := uint32(2*i + 1)
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}) != nil ||
				fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return // closed
			}
		}
	}
	t.Run("rapid reset", func(t *testing.T) {
		c, fr := p.rawH2(t)
		go reset(fr, 4*maxResetBurst)
		closedBy(t, c, fr)
	})
	t.Run("a page's resets", func(t *testing.T) {
		c, fr := p.rawH2(t)
		reset(fr, 100)
		last := uint32(2*100 + 1)
		require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: last, BlockFragment: getBlock("127.0.0.1:1"), EndStream: true, EndHeaders: true}))
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			f, err := fr.ReadFrame()
			require.NoError(t, err, "the connection ended before its last stream's answer")
			if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == last {
				return // answered
			}
			_, away := f.(*http2.GoAwayFrame)
			require.False(t, away, "closed with a GOAWAY")
		}
	})
}
