//go:build unix

package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
)

// With the default limits, the host's own programs open a thousand idle
// tunnels (a browser's, a package manager's, a sync client's together),
// and another of its programs still gets a page.
func TestHostProgramsOpenAThousandTunnels(t *testing.T) {
	const tunnels = 1000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < 5*tunnels {
		t.Skipf("needs %d open files (ulimit -n), has %d", 5*tunnels, lim.Cur)
	}
	held := make(chan net.Conn, tunnels)
	target := echoServer(t, held)
	p := newTestProxy(t, intents.Intents{}, nil)
	for i := range tunnels {
		_, status, body := connectFrom(t, netip.Addr{}, p.addr, target)
		require.Equal(t, http.StatusOK, status, "tunnel %d: %s", i, body)
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page") }))
	defer page.Close()
	resp, body := p.raw(t, "GET "+page.URL+"/ HTTP/1.1\r\nHost: "+strings.TrimPrefix(page.URL, "http://")+"\r\n\r\n")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "page", body)
	for range tunnels {
		(<-held).Close()
	}
}
