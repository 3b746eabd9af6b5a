package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, strconv.FormatInt(n, 10))
	}))
	defer upstream.Close()
	defer close(release)
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.ResponseHeaderTimeout = timeout })
	up := strings.TrimPrefix(upstream.URL, "http://")

	resp, body := p.raw(t, "GET "+upstream.URL+"/hang HTTP/1.1\r\nHost: "+up+"\r\n\r\n")
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
