package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
)

// serveMetrics serves p's metrics on a loopback listener and returns its
// address.
func serveMetrics(t *testing.T, p *testProxy) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- p.ServeMetrics(l) }()
	t.Cleanup(func() {
		p.Close()
		assert.ErrorIs(t, <-served, ErrServerClosed)
	})
	return l.Addr().String()
}

// The metrics listener holds few clients and descriptors however many
// connect and stay silent, so that the proxy's own listeners go on
// serving; once they leave, it answers a scraper. It serves loopback
// only unless told otherwise, whatever the proxy's Allow.
func TestMetricsListenerLimits(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.Allow = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")} })
	addr := serveMetrics(t, p)
	fds := openFiles(t)
	const silent = 300
	var conns []net.Conn
	for range silent {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	var ll *limitListener
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.limits {
			if l.Addr().String() == addr {
				ll = l
			}
		}
		if ll == nil {
			return false
		}
		held, parked, _ := ll.counts()
		return held == metricsMaxClients && parked == metricsMaxClients
	}, 10*time.Second, time.Millisecond, "the metrics listener fills its places and its queue")
	held := openFiles(t) - fds - silent
	t.Logf("%d silent clients: the proxy holds %d descriptors for them", silent, held)
	assert.LessOrEqual(t, held, 2*metricsMaxClients+8, "descriptors the listener holds for %d silent clients", silent)
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	resp, body := proxyGet(t, c, upstream.URL)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the proxy serves on: %s", body)

	for _, c := range conns {
		c.Close()
	}
	client := &http.Client{Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	resp, err = client.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(metrics), "intents_proxy_forwarded_total 1")

	q := newTestProxy(t, intents.Intents{}, func(s *Server) { s.MetricsAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")} })
	resp, err = client.Get("http://" + serveMetrics(t, q) + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "127.0.0.1 is not in MetricsAllow")
}

// Without MetricsAllow the metrics are a loopback client's alone, however
// open the proxy's own Allow is; with it, its clients'.
func TestMetricsAllowed(t *testing.T) {
	s := &Server{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}
	assert.True(t, s.metricsAllowed("127.0.0.1:1000"))
	assert.True(t, s.metricsAllowed("[::1]:1000"))
	assert.False(t, s.metricsAllowed("192.0.2.1:1000"), "another host")
	s.MetricsAllow = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	assert.True(t, s.metricsAllowed("192.0.2.1:1000"))
	assert.False(t, s.metricsAllowed("198.51.100.1:1000"))
}
