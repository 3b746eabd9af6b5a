package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xproxy "golang.org/x/net/proxy"

	"github.com/sockintents/intents"
)

// claimedRemote is a listener whose connections say they come from
// remote: a client of another host, without a second host.
type claimedRemote struct {
	net.Listener
	remote net.Addr
}

func (l claimedRemote) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteConn{c, l.remote}, nil
}

type remoteConn struct {
	net.Conn
	remote net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.remote }

// Without Allow the proxy serves the host's own programs only: a client
// from another host is refused, over HTTP and SOCKS5, while loopback
// clients are served.
func TestDefaultServesTheHostOnly(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	p := newTestProxy(t, intents.Intents{}, nil)
	require.Nil(t, p.Allow)

	resp, err := p.client(nil).Get(upstream.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a loopback client")

	for _, remote := range []string{"192.0.2.7:40000", "[2001:db8::7]:40000", "[::ffff:192.0.2.7]:40000"} {
		t.Run(remote, func(t *testing.T) {
			assert.False(t, p.allowed(remote))
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			served := make(chan error, 1)
			go func() {
				served <- p.Serve(claimedRemote{l, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(remote))}, intents.Intents{})
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			resp, body := proxyGet(t, c, upstream.URL)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
			l.Close()
			<-served

			sl, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			go func() {
				served <- p.ServeSOCKS(claimedRemote{sl, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(remote))}, intents.Intents{})
			}()
			d, err := xproxy.SOCKS5("tcp", sl.Addr().String(), nil, xproxy.Direct)
			require.NoError(t, err)
			tc, err := d.Dial("tcp", upstream.Listener.Addr().String())
			if err == nil {
				tc.Close()
			}
			assert.Error(t, err, "SOCKS5")
			sl.Close()
			<-served
		})
	}
	for _, local := range []string{"127.0.0.1:1", "[::1]:1", "127.1.2.3:1"} {
		assert.True(t, p.allowed(local), local)
	}
	if a, ok := hostAddr(t); ok {
		assert.True(t, p.allowed(netip.AddrPortFrom(a, 1).String()), "the host's own address %v", a)
	}
}
