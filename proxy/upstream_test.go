package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
)

// An origin that sends no response headers is given up on after
// ResponseHeaderTimeout, with 504 and the reason; the timeout counts from
// when the request was sent whole, so an upload slower than it is not
// cut.
func TestResponseHeaderTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	hanging := hangingServer(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		io.WriteString(w, strconv.FormatInt(n, 10))
	}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.ResponseHeaderTimeout = timeout })
	up := strings.TrimPrefix(upstream.URL, "http://")

	resp, body := p.raw(t, "GET "+hanging.URL+"/ HTTP/1.1\r\nHost: "+strings.TrimPrefix(hanging.URL, "http://")+"\r\n\r\n")
	assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, body)
	assert.Contains(t, body, "no response headers")

	// An upload that takes three timeouts to send.
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	const parts = 6
	_, err = io.WriteString(c, "POST "+upstream.URL+"/upload HTTP/1.1\r\nHost: "+up+"\r\nContent-Length: "+strconv.Itoa(parts)+"\r\n\r\n")
	require.NoError(t, err)
	for range parts {
		_, err = io.WriteString(c, "x")
		require.NoError(t, err)
		time.Sleep(timeout / 2) // the client's pace
	}
	buf := make([]byte, 4096)
	n, err := io.ReadAtLeast(c, buf, 12)
	require.NoError(t, err)
	assert.Contains(t, string(buf[:n]), "200 OK", "a slow upload is not the origin's delay")
}

// Each client address has its own upstream connections: one whose
// requests hang holds none of another's, even where the Transport allows
// only two connections; and the metrics count every client's requests.
func TestOneClientCannotHoldTheUpstreamPool(t *testing.T) {
	from := dialerFrom(t, netip.MustParseAddr("127.0.0.2"))
	hanging := hangingServer(t)
	fine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer fine.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.Transport.MaxConns = 2 })
	up := strings.TrimPrefix(hanging.URL, "http://")
	for range 2 {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "GET "+hanging.URL+"/ HTTP/1.1\r\nHost: "+up+"\r\n\r\n")
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		var b strings.Builder
		p.Metrics(&b)
		return strings.Contains(b.String(), `intents_proxy_forwarded_total 2`)
	}, 10*time.Second, time.Millisecond, "both hanging requests are forwarded")

	c, err := from.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	resp, body := proxyGet(t, c, fine.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "ok", body)
	var b strings.Builder
	p.Metrics(&b)
	assert.Contains(t, b.String(), `intents_proxy_requests_total{path="system"} 3`, "every client's requests")
}

// A client that stops sending its request body midway is answered 408
// once RequestBodyTimeout passes with nothing new, over HTTP/1.1 and
// HTTP/2; one that sends a part within each timeout is not cut, nor is
// a request whose body is done and whose origin answers after the
// timeout.
func TestRequestBodyTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		if r.URL.Path == "/slow" {
			time.Sleep(3 * timeout) // the origin's own pace
		}
		io.WriteString(w, strconv.FormatInt(n, 10))
	}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.RequestBodyTimeout = timeout })
	up := strings.TrimPrefix(upstream.URL, "http://")
	post := func(path string, length, sent int, pace time.Duration) (*http.Response, string) {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		_, err = io.WriteString(c, "POST "+upstream.URL+path+" HTTP/1.1\r\nHost: "+up+"\r\nContent-Length: "+strconv.Itoa(length)+"\r\n\r\n")
		require.NoError(t, err)
		for range sent {
			time.Sleep(pace) // the client's pace
			_, err = io.WriteString(c, "x")
			require.NoError(t, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	resp, body := post("/stalled", 10, 2, 0)
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, body)
	assert.Contains(t, body, "request body")
	resp, body = post("/paced", 4, 4, timeout/2)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "4", body)
	resp, body = post("/slow", 2, 2, 0)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "2", body)

	h2 := newTLSProxy(t, func(s *Server) { s.RequestBodyTimeout = timeout })
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("xx"))
	req := httptest.NewRequest("POST", upstream.URL+"/stalled", pr).WithContext(t.Context())
	req.ContentLength = 10
	resp, err := h2.h2Conn(t).RoundTrip(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "HTTP/2: %s", b)
}

// At maxClientPools, the pool of the client that used it least recently
// is the one dropped: a client that keeps asking keeps its connections.
func TestClientPoolsDropTheLeastRecentlyUsed(t *testing.T) {
	p := newClientPools(&intents.Transport{})
	client := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}) }
	for i := range maxClientPools {
		p.pool(client(i))
	}
	kept := p.pool(client(0)) // used again: now the most recent
	p.pool(client(maxClientPools))
	p.mu.Lock()
	defer p.mu.Unlock()
	assert.Len(t, p.pools, maxClientPools)
	assert.Contains(t, p.pools, client(0), "the client that asked again keeps its pool")
	assert.Same(t, kept, p.pools[client(0)].tr)
	assert.NotContains(t, p.pools, client(1), "the least recently used is dropped")
}
