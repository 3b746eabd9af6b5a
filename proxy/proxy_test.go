package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xproxy "golang.org/x/net/proxy"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
)

// testProxy is a Server over the loopback path alone, serving HTTP on one
// listener (with intents in) and SOCKS5 on another.
type testProxy struct {
	*Server
	addr, socks string
}

func newTestProxy(t *testing.T, in intents.Intents, configure func(*Server)) *testProxy {
	t.Helper()
	// No system name servers: nothing is ever sent beyond loopback.
	empty := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "lo"}}, Policy: &policy.EAF{}, NoWatch: true, ResolvConf: empty})
	require.NoError(t, err)
	// The origins of the tests are on loopback, on ports of their own.
	s := &Server{Transport: &intents.Transport{Manager: m}, Dialer: &intents.Dialer{Manager: m}, AllowLocal: true, AnyPort: true}
	if configure != nil {
		configure(s)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 2)
	go func() { served <- s.Serve(hl, in) }()
	go func() { served <- s.ServeSOCKS(sl, in) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		for range 2 {
			assert.ErrorIs(t, <-served, ErrServerClosed)
		}
		s.Transport.CloseIdleConnections()
		m.Close()
	})
	return &testProxy{Server: s, addr: hl.Addr().String(), socks: sl.Addr().String()}
}

// client is an HTTP client that uses p as its proxy.
func (p *testProxy) client(tlsConf *tls.Config) *http.Client {
	u := &url.URL{Scheme: "http", Host: p.addr}
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: tlsConf, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr}
}

// raw sends text to the proxy as is and reads the response.
func (p *testProxy) raw(t *testing.T, text string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, text)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// A plain HTTP request is forwarded byte for byte through the Transport,
// with the intents of its listener, its destination's rule and its
// Intents header; the hop-by-hop headers are removed both ways (RFC 9110
// §7.6.1), the Intents header is not forwarded, and Via is added.
func TestForward(t *testing.T) {
	object := randomBytes(t, 1<<20)
	var got http.Header
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Kept", "1")
		w.Write(object)
	}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{Timeliness: intents.TimelinessInteractive}, func(s *Server) {
		s.Rules = []Rule{{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Intents: intents.Intents{Cost: intents.CostBalance}}}
		s.PathHeader = "Intents-Path"
	})
	req, _ := http.NewRequest("GET", upstream.URL+"/object", nil)
	req.Header.Set("Intents", "category=bulk")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	req.Header.Set("Proxy-Connection", "keep-alive")
	req.Header.Set("X-End", "kept")
	req.Header.Set("X-Forwarded-For", "192.0.2.7")
	resp, err := p.client(nil).Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, sha256.Sum256(object), sha256.Sum256(body), "byte for byte")

	assert.Equal(t, "kept", got.Get("X-End"))
	assert.Equal(t, []string{"192.0.2.7"}, got.Values("X-Forwarded-For"), "the client's, as it was")
	for _, h := range []string{"Intents", "X-Hop", "Proxy-Connection", "X-Forwarded-Host"} {
		assert.Empty(t, got.Values(h), "%s forwarded", h)
	}
	assert.Equal(t, []string{"1.1 intents-proxy"}, got.Values("Via"))
	assert.Equal(t, "1", resp.Header.Get("X-Kept"))
	assert.Equal(t, "system", resp.Header.Get("Intents-Path"), "a loopback destination: routed by the system")
	assert.Empty(t, resp.Header.Values("X-Resp-Hop"), "a header the response's Connection names")
	assert.Empty(t, resp.Header.Values("Keep-Alive"))

	var metrics bytes.Buffer
	p.Metrics(&metrics)
	// A loopback destination is routed by the system, not over a path.
	assert.Contains(t, metrics.String(), `intents_proxy_requests_total{path="system"} 1`)
	assert.Contains(t, metrics.String(), fmt.Sprintf(`intents_proxy_response_bytes_total{path="system"} %d`, len(object)))
}

// A request's intents are its listener's, then its destination's rule's,
// then its Intents header's, each merged over the one before.
func TestRequestIntents(t *testing.T) {
	s := &Server{Rules: []Rule{
		{Host: "*.example", Intents: intents.Intents{Cost: intents.CostBalance, Category: intents.CategoryStream}},
		{Host: "*", Intents: intents.Intents{Category: intents.CategoryControl}},
	}}
	listener := intents.Intents{Timeliness: intents.TimelinessInteractive, Category: intents.CategoryQuery}
	ctx := context.WithValue(context.Background(), listenerIntentsKey{}, listener)
	req := func(method, target, header string) *http.Request {
		r := httptest.NewRequestWithContext(ctx, method, target, nil)
		if header != "" {
			r.Header.Set("Intents", header)
		}
		return r
	}
	in, err := s.requestIntents(req("GET", "http://a.example/x", "category=bulk"))
	require.NoError(t, err)
	assert.Equal(t, intents.CategoryBulk, in.Category, "the header's over the rule's")
	assert.Equal(t, intents.CostBalance, in.Cost, "the rule's")
	assert.Equal(t, intents.TimelinessInteractive, in.Timeliness, "the listener's")

	in, err = s.requestIntents(req("CONNECT", "a.example:443", ""))
	require.NoError(t, err)
	assert.Equal(t, intents.CategoryStream, in.Category, "a tunnel's rule is by its authority")

	in, err = s.requestIntents(req("GET", "http://other.test/", ""))
	require.NoError(t, err)
	assert.Equal(t, intents.CategoryControl, in.Category, "the first rule that matches")

	_, err = s.requestIntents(req("GET", "http://other.test/", "recv=lots"))
	assert.Error(t, err)
}

// A rule's prohibition holds whatever the request's header says, for
// forwarded requests and for tunnels, CONNECT and SOCKS5: nothing leaves
// on the prohibited path (here the only one: no path, 502, or SOCKS5's
// refusal).
func TestRuleProhibitionHolds(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	host := strings.TrimPrefix(upstream.URL, "http://")
	p := newTestProxy(t, intents.Intents{}, func(s *Server) {
		s.Rules = []Rule{{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Intents: intents.Intents{Interfaces: map[string]intents.Level{"lo": intents.LevelProhibit}}}}
	})
	resp, body := p.raw(t, "GET "+upstream.URL+"/ HTTP/1.1\r\nHost: "+host+"\r\nIntents: require=lo\r\n\r\n")
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	assert.Contains(t, body, "no permitted path")

	resp, body = p.raw(t, "CONNECT "+host+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	assert.Contains(t, body, "no permitted path")

	d, err := xproxy.SOCKS5("tcp", p.socks, nil, xproxy.Direct)
	require.NoError(t, err)
	c, err := d.Dial("tcp", host)
	if err == nil {
		c.Close()
	}
	assert.Error(t, err, "SOCKS5 tunnel")

	// Without the rule each of them is served.
	open := newTestProxy(t, intents.Intents{}, nil)
	d, err = xproxy.SOCKS5("tcp", open.socks, nil, xproxy.Direct)
	require.NoError(t, err)
	c, err = d.Dial("tcp", host)
	require.NoError(t, err)
	c.Close()
}

// Each refusal is a clear status with a one-line reason.
func TestRefusals(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AnyPort = false })
	up := strings.TrimPrefix(upstream.URL, "http://")
	for _, c := range []struct {
		name, request string
		status        int
		reason        string
	}{
		{"origin-form", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "not a proxy request"},
		{"https in the clear", "GET https://" + up + "/ HTTP/1.1\r\nHost: " + up + "\r\n\r\n", 400, "not a proxy request"},
		{"bad intents", "GET " + upstream.URL + "/ HTTP/1.1\r\nHost: " + up + "\r\nIntents: category=nonsense\r\n\r\n", 400, "bad Intents header"},
		{"forbidden port", "CONNECT " + up + " HTTP/1.1\r\nHost: " + up + "\r\n\r\n", 403, "is not allowed"},
		{"connect to itself", "CONNECT " + p.addr + " HTTP/1.1\r\nHost: " + p.addr + "\r\n\r\n", 508, "this proxy itself"},
		{"connect to itself by name", "CONNECT localhost:" + port(p.addr) + " HTTP/1.1\r\nHost: localhost:" + port(p.addr) + "\r\n\r\n", 508, "this proxy itself"},
		{"request to itself", "GET http://" + p.addr + "/ HTTP/1.1\r\nHost: " + p.addr + "\r\n\r\n", 508, "this proxy itself"},
		{"a loop", "GET " + upstream.URL + "/ HTTP/1.1\r\nHost: " + up + "\r\nVia: 1.1 intents-proxy\r\n\r\n", 508, "came through this proxy"},
		{"unknown host", "GET http://unknown.invalid/ HTTP/1.1\r\nHost: unknown.invalid\r\n\r\n", 502, "unknown.invalid"},
		{"malformed request line", "GET\r\n\r\n", 400, ""},
		{"malformed port", "GET http://example.com:99999/ HTTP/1.1\r\nHost: example.com:99999\r\n\r\n", 400, "malformed"},
		{"malformed port in CONNECT", "CONNECT example.com:99999 HTTP/1.1\r\nHost: example.com:99999\r\n\r\n", 400, "host:port"},
		{"64 kB of headers", "GET " + upstream.URL + "/ HTTP/1.1\r\nHost: " + up + "\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", 431, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := p.raw(t, c.request)
			assert.Equal(t, c.status, resp.StatusCode, body)
			assert.Contains(t, body, c.reason)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(body), "\n")+1, "one line: %q", body)
		})
	}
}

// The PAC file routes destinations to listeners, the rest to the
// listener it was fetched from.
func TestPAC(t *testing.T) {
	p := newTestProxy(t, intents.Intents{}, func(s *Server) {
		s.PAC = []PACRoute{
			{Host: "*.videocdn.example", Proxy: "127.0.0.1:8081"},
			{Host: "Updates.example", Proxy: "127.0.0.1:8082"},
			{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Proxy: "127.0.0.1:8083"},
			{Prefix: netip.MustParsePrefix("2001:db8::/32"), Proxy: "127.0.0.1:8084"}, // PAC cannot say
		}
	})
	resp, body := p.raw(t, "GET /proxy.pac HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "application/x-ns-proxy-autoconfig", resp.Header.Get("Content-Type"))
	assert.Equal(t, `function FindProxyForURL(url, host) {
	if (dnsDomainIs(host.toLowerCase(), ".videocdn.example")) return "PROXY 127.0.0.1:8081";
	if (host.toLowerCase() == "updates.example") return "PROXY 127.0.0.1:8082";
	if (isInNet(host, "10.0.0.0", "255.0.0.0")) return "PROXY 127.0.0.1:8083";
	return "PROXY `+p.addr+`";
}
`, body)
}

// openFiles counts the process's open file descriptors.
func openFiles(t *testing.T) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	return len(fds)
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// Clients outside the allow-list get 403; without credentials, or with
// wrong ones, 407; with the right ones, service. The PAC file is served
// without credentials (a browser fetches it with none), to allowed
// clients only.
func TestAllowAndAuth(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Empty(t, r.Header.Values("Proxy-Authorization"), "credentials are not forwarded")
	}))
	defer upstream.Close()
	up := strings.TrimPrefix(upstream.URL, "http://")
	get := "GET " + upstream.URL + "/ HTTP/1.1\r\nHost: " + up + "\r\n"

	far := newTestProxy(t, intents.Intents{}, func(s *Server) { s.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
	resp, body := far.raw(t, get+"\r\n")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	resp, body = far.raw(t, "GET "+PACPath+" HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no PAC file for a client not allowed: %s", body)

	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.User, s.Password = "u", "secret" })
	resp, body = p.raw(t, "GET "+PACPath+" HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the PAC file without credentials: %s", body)
	assert.Contains(t, body, "FindProxyForURL")
	resp, _ = p.raw(t, get+"\r\n")
	assert.Equal(t, http.StatusProxyAuthRequired, resp.StatusCode)
	assert.Equal(t, `Basic realm="intents proxy"`, resp.Header.Get("Proxy-Authenticate"))
	basic := func(cred string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(cred)) + "\r\n"
	}
	resp, _ = p.raw(t, get+basic("u:wrong")+"\r\n")
	assert.Equal(t, http.StatusProxyAuthRequired, resp.StatusCode)
	resp, body = p.raw(t, get+basic("u:secret")+"\r\n")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}

// A CONNECT tunnel carries TLS with HTTP/1.1 and HTTP/2 inside; its bytes
// are counted on its path and teach the host's size for its next tunnel.
func TestConnectTunnel(t *testing.T) {
	object := randomBytes(t, 300<<10)
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(object)
	}))
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	portNum, _ := strconv.Atoi(u.Port())
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AnyPort, s.Ports = false, []uint16{uint16(portNum)} })
	tlsConf := upstream.Client().Transport.(*http.Transport).TLSClientConfig

	for _, h2 := range []bool{false, true} {
		c := p.client(tlsConf.Clone())
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = h2
		if !h2 {
			c.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		resp, err := c.Get(upstream.URL)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, sha256.Sum256(object), sha256.Sum256(body))
		want := 1
		if h2 {
			want = 2
		}
		assert.Equal(t, want, resp.ProtoMajor)
		c.CloseIdleConnections() // ends the tunnel
	}
	require.Eventually(t, func() bool { return p.sizes.predict("127.0.0.1") >= int64(len(object)) },
		10*time.Second, 10*time.Millisecond, "the host's tunnels' size is learnt")

	var metrics bytes.Buffer
	require.Eventually(t, func() bool {
		metrics.Reset()
		p.Metrics(&metrics)
		return strings.Contains(metrics.String(), `intents_proxy_tunnels_total{path="system"} 2`)
	}, 10*time.Second, 10*time.Millisecond, "both tunnels counted once ended")
	assert.Regexp(t, `intents_proxy_tunnel_received_bytes_total\{path="system"\} [0-9]{6}`, metrics.String())
}

// SOCKS5 CONNECT, without and with username and password, as
// golang.org/x/net/proxy's client speaks it.
func TestSOCKS5(t *testing.T) {
	object := randomBytes(t, 100<<10)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(object) }))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	portNum, _ := strconv.Atoi(u.Port())
	fetch := func(p *testProxy, auth *xproxy.Auth) ([]byte, error) {
		d, err := xproxy.SOCKS5("tcp", p.socks, auth, xproxy.Direct)
		require.NoError(t, err)
		c := &http.Client{Transport: &http.Transport{DialContext: d.(xproxy.ContextDialer).DialContext}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(upstream.URL)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	open := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AnyPort, s.Ports = false, []uint16{uint16(portNum)} })
	body, err := fetch(open, nil)
	require.NoError(t, err)
	assert.Equal(t, object, body)

	closed := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AnyPort = false }) // the upstream's port is not allowed
	_, err = fetch(closed, nil)
	assert.ErrorContains(t, err, "not allowed")

	authed := newTestProxy(t, intents.Intents{}, func(s *Server) {
		s.AnyPort, s.Ports = false, []uint16{uint16(portNum)}
		s.User, s.Password = "u", "secret"
	})
	_, err = fetch(authed, &xproxy.Auth{User: "u", Password: "wrong"})
	assert.Error(t, err)
	_, err = fetch(authed, nil)
	assert.Error(t, err)
	body, err = fetch(authed, &xproxy.Auth{User: "u", Password: "secret"})
	require.NoError(t, err)
	assert.Equal(t, object, body)

	// A client outside the allow-list is refused without a chance to try
	// passwords.
	far := newTestProxy(t, intents.Intents{}, func(s *Server) {
		s.AnyPort, s.Ports = false, []uint16{uint16(portNum)}
		s.User, s.Password = "u", "secret"
		s.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	_, err = fetch(far, &xproxy.Auth{User: "u", Password: "guess"})
	assert.ErrorContains(t, err, "not allowed", "refused before any password is looked at")
}

// Path names become label values the text format can carry.
func TestMetricsLabels(t *testing.T) {
	st := newStats()
	st.tunnel("we\"ird\n", 1, 2)
	var b bytes.Buffer
	st.set.WritePrometheus(&b)
	assert.Contains(t, b.String(), `intents_proxy_tunnels_total{path="we_ird_"} 1`)
}

// A client that sends its headers a byte at a time is cut at the
// header-read timeout; the proxy's other clients are served meanwhile.
func TestSlowHeadersAreCut(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.ReadHeaderTimeout = 300 * time.Millisecond })
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	stop := make(chan struct{})
	cut := make(chan error, 1)
	go func() {
		line := "GET " + upstream.URL + "/ HTTP/1.1\r\nX-Slow: " + strings.Repeat("a", 1000)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte{line[i%len(line)]}); err != nil {
				cut <- err
				return
			}
		}
	}()
	defer close(stop)
	resp, body := p.raw(t, "GET "+upstream.URL+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "cut by the proxy, not by the test's deadline")
	if len(got) > 0 {
		assert.Regexp(t, `^HTTP/1.1 4\d\d `, string(got), "a status, if any")
	}
}

// A streamed body (server-sent events) reaches the client as it is sent.
func TestStreamingIsFlushed(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, nil)
	c := p.client(nil)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", upstream.URL, nil)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err, "the first event arrives while the stream is open")
	assert.Equal(t, "data: first\n", line)
}

// An Upgrade (WebSocket's way) passes through: the 101 and then the bytes
// both ways.
func TestUpgradePassesThrough(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(c, brw)
	}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, nil)
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	up := strings.TrimPrefix(upstream.URL, "http://")
	io.WriteString(c, "GET "+upstream.URL+"/ HTTP/1.1\r\nHost: "+up+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	io.WriteString(c, "hello")
	got := make([]byte, 5)
	_, err = io.ReadFull(br, got)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))
}

// A backend that resets mid-body: the client's body ends in an error, not
// a short body taken for whole, and the proxy serves the next request.
func TestBackendResetMidBody(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			io.WriteString(w, "ok")
			return
		}
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
		c.Write(make([]byte, 100000))
		c.(*net.TCPConn).SetLinger(0)
		c.Close() // a reset
	}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, nil)
	c := p.client(nil)
	defer c.CloseIdleConnections()
	resp, err := c.Get(upstream.URL + "/reset")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	assert.Error(t, err, "a body cut short is an error")
	resp, err = c.Get(upstream.URL + "/ok")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))
}

// A client that goes away mid-download ends the request upstream.
func TestClientGoneEndsTheRequest(t *testing.T) {
	ended := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		chunk := make([]byte, 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, nil)
	c := p.client(nil)
	resp, err := c.Get(upstream.URL)
	require.NoError(t, err)
	_, err = io.ReadFull(resp.Body, make([]byte, 100<<10))
	require.NoError(t, err)
	resp.Body.Close() // gone
	c.CloseIdleConnections()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request did not end after its client left")
	}
}

// Many clients at once are all served (beyond MaxClients they wait to be
// accepted); the proxy's file descriptors return to what they were once
// it closes, and its goroutines end (TestMain's goleak).
func TestManyClients(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	fds := openFiles(t)
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.MaxClients = 500 })
	defer func() {
		p.Close()
		p.Transport.CloseIdleConnections()
		require.Eventually(t, func() bool { return openFiles(t) <= fds }, 10*time.Second, 10*time.Millisecond,
			"descriptors: %d before, %d after", fds, openFiles(t))
	}()
	const clients = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range clients {
		wg.Go(func() {
			c, err := net.Dial("tcp", p.addr)
			if err != nil {
				mu.Lock()
				statuses[-1]++
				mu.Unlock()
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			up := strings.TrimPrefix(upstream.URL, "http://")
			io.WriteString(c, "GET "+upstream.URL+"/ HTTP/1.1\r\nHost: "+up+"\r\nConnection: close\r\n\r\n")
			status := -2
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{200: clients}, statuses)
}

// A tunnel relays between two *net.TCPConn, which relayCopy splices (a
// pipe lent only while bytes move): the client's end under the
// listener's wrapper, the server's under the Dialer's.
func TestTunnelEndsAreSockets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ll := newLimitListener(l, 1, nil)
	defer ll.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ll.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "lo"}}, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	up, err := (&intents.Dialer{Manager: m}).DialContext(context.Background(), "tcp", l.Addr().String())
	require.NoError(t, err)
	defer up.Close()
	client := <-accepted
	require.NotNil(t, client)
	defer client.Close()
	assert.IsType(t, &net.TCPConn{}, rawConn(client))
	assert.IsType(t, &net.TCPConn{}, rawConn(up))
}

// An HTTP/1.0 client reads a response to the connection's end: when the
// origin's chunked body breaks off, the proxy resets the connection, so
// the client cannot take what came for the whole.
func TestHTTP10CutBodyIsReset(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		c.Close() // no last chunk
	}))
	defer upstream.Close()
	p := newTLSProxy(t, nil)
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "TLS"}[overTLS], func(t *testing.T) {
			c := p.http1Client(t, overTLS)
			testHTTP10CutBodyIsReset(t, c, upstream.URL)
		})
	}
}

// http1Client is an HTTP/1.1 client's connection to p's plain listener,
// or to its TLS one (no close_notify from the proxy is an orderly end
// there, so a cut must be a reset too).
func (p *tlsProxy) http1Client(t *testing.T, overTLS bool) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if overTLS {
		c, err = tls.Dial("tcp", p.tlsAddr, &tls.Config{RootCAs: p.ca.Pool, NextProtos: []string{"http/1.1"}})
	} else {
		c, err = net.Dial("tcp", p.addr)
	}
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func testHTTP10CutBodyIsReset(t *testing.T, c net.Conn, upstreamURL string) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	up := strings.TrimPrefix(upstreamURL, "http://")
	_, err := io.WriteString(c, "GET "+upstreamURL+"/ HTTP/1.0\r\nHost: "+up+"\r\n\r\n")
	require.NoError(t, err)
	got, err := io.ReadAll(c)
	assert.ErrorIs(t, err, syscall.ECONNRESET, "read %q", got)
}

// A request with both Transfer-Encoding and Content-Length is forwarded
// framed by its Transfer-Encoding, and its connection closed after the
// response (RFC 9112 §6.1): what the client sent after it is not read as
// a request. One with Content-Length alone keeps its connection.
func TestAmbiguousFramingClosesTheConnection(t *testing.T) {
	var bodies sync.Map
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies.Store(r.URL.Path, string(b))
	}))
	defer upstream.Close()
	p := newTLSProxy(t, nil)
	up := strings.TrimPrefix(upstream.URL, "http://")
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "TLS"}[overTLS], func(t *testing.T) {
			bodies.Clear()
			testAmbiguousFraming(t, p.http1Client(t, overTLS), upstream.URL, up, &bodies)
		})
	}
	resp, body := p.raw(t, "POST "+upstream.URL+"/plain HTTP/1.1\r\nHost: "+up+"\r\nContent-Length: 5\r\n\r\nhello")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.False(t, resp.Close, "a request with a length alone keeps its connection")
}

func testAmbiguousFraming(t *testing.T, c net.Conn, upstreamURL, up string, bodies *sync.Map) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	smuggled := "GET " + upstreamURL + "/smuggled HTTP/1.1\r\nHost: " + up + "\r\n\r\n"
	_, err := io.WriteString(c, "POST "+upstreamURL+"/first HTTP/1.1\r\nHost: "+up+"\r\nContent-Length: "+
		strconv.Itoa(len("5\r\nhello\r\n0\r\n\r\n")+len(smuggled))+"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"+smuggled)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, resp.Close, "the response says the connection closes")
	_, err = br.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the connection is closed")
	got, _ := bodies.Load("/first")
	assert.Equal(t, "hello", got, "framed by the Transfer-Encoding")
	_, smuggledSeen := bodies.Load("/smuggled")
	assert.False(t, smuggledSeen, "what followed was read as a request")
}

// dialerFrom dials from a, a loopback address other than 127.0.0.1: a
// second client on this host. The test is skipped where loopback has no
// such address (Linux has 127.0.0.0/8).
func dialerFrom(t *testing.T, a netip.Addr) *net.Dialer {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(a.String(), "0"))
	if err != nil {
		t.Skipf("loopback has no %s here: %v", a, err)
	}
	l.Close()
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: a.AsSlice()}, Timeout: 10 * time.Second}
}

// hangingServer is an origin that reads a request and never answers it,
// until the test ends.
func hangingServer(t *testing.T) *httptest.Server {
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(release)
		s.Close()
	})
	return s
}
