package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xproxy "golang.org/x/net/proxy"

	"github.com/sockintents/intents"
)

// hostAddr is a non-loopback address of one of this host's interfaces,
// if it has one.
func hostAddr(t *testing.T) (netip.Addr, bool) {
	ifas, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, ifa := range ifas {
		if p, err := netip.ParsePrefix(ifa.String()); err == nil && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// By default nothing the proxy forwards reaches its own host, whatever
// the form of the address, and plain HTTP reaches only the allowed
// ports, as tunnels do: a client cannot talk to a service that listens
// for the host alone, nor speak another protocol through a POST.
func TestDestinationPolicy(t *testing.T) {
	var reached atomic.Int64
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer local.Close()
	port := port(local.Listener.Addr().String())
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AllowLocal = false })
	targets := []string{"127.0.0.1", "127.0.0.2", "localhost", "LocalHost.", "admin.localhost", "::1", "::ffff:127.0.0.1", "0.0.0.0", "::"}
	if a, ok := hostAddr(t); ok {
		targets = append(targets, a.String())
	}
	for _, host := range targets {
		target := net.JoinHostPort(host, port)
		resp, body := p.raw(t, "GET http://"+target+"/ HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "GET %s: %s", target, body)
		assert.Contains(t, body, "own host", target)
		resp, body = p.raw(t, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "CONNECT %s: %s", target, body)
		d, err := xproxy.SOCKS5("tcp", p.socks, nil, xproxy.Direct)
		require.NoError(t, err)
		_, err = d.Dial("tcp", target)
		assert.ErrorContains(t, err, "not allowed", "SOCKS5 %s", target)
	}
	assert.Zero(t, reached.Load(), "the local service was reached")

	// With the host allowed, the ports still hold for plain HTTP: an SMTP
	// server on port 25 gets not a byte of a POST that speaks SMTP.
	smtp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer smtp.Close()
	got := make(chan int, 1)
	go func() {
		c, err := smtp.Accept()
		if err != nil {
			got <- -1
			return
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- int(n)
	}()
	open := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AnyPort = false })
	target := smtp.Addr().String()
	mail := "HELO x\r\nMAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n"
	resp, body := open.raw(t, "POST http://"+target+"/ HTTP/1.1\r\nHost: "+target+"\r\nContent-Length: "+strconv.Itoa(len(mail))+"\r\n\r\n"+mail)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	assert.Contains(t, body, "is not allowed")
	smtp.Close()
	assert.Equal(t, -1, <-got, "the SMTP server was connected to")

	// The ports given are the ports served.
	allowed := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AnyPort, s.Ports = false, []uint16{mustPort(t, port)} })
	resp, body = allowed.raw(t, "GET "+local.URL+"/ HTTP/1.1\r\nHost: "+local.Listener.Addr().String()+"\r\n\r\n")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}

// Control keeps a socket off the host's addresses (unless AllowLocal)
// and off the proxy's own listeners (always): set on the Dialer, it
// catches a name that resolves to the host.
func TestControlRefusesTheLocalHost(t *testing.T) {
	p := newTestProxy(t, intents.Intents{}, func(s *Server) { s.AllowLocal = false })
	resp, _ := p.raw(t, "GET "+PACPath+" HTTP/1.1\r\nHost: x\r\n\r\n") // its listener is served
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, addr := range []string{"127.0.0.1:80", "[::1]:443", "[::ffff:127.0.0.9]:80", "0.0.0.0:80"} {
		assert.ErrorIs(t, p.Control("tcp", addr, nil), ErrLocalDestination, addr)
	}
	if a, ok := hostAddr(t); ok {
		assert.ErrorIs(t, p.Control("tcp", netip.AddrPortFrom(a, 80).String(), nil), ErrLocalDestination, a.String())
	}
	assert.NoError(t, p.Control("tcp", "192.0.2.1:80", nil), "a documentation address is not this host")
	assert.ErrorIs(t, p.Control("tcp", p.addr, nil), errLoop)

	p.AllowLocal = true
	assert.NoError(t, p.Control("tcp", "127.0.0.1:80", nil))
	assert.ErrorIs(t, p.Control("tcp", p.addr, nil), errLoop, "the proxy's own listeners, even with the host allowed")

	// Through a Dialer, as the CLI wires it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	p.AllowLocal = false
	d := &intents.Dialer{Manager: p.Dialer.Manager, Control: p.Control}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = d.DialContext(ctx, "tcp", l.Addr().String())
	assert.ErrorIs(t, err, ErrLocalDestination)
}

func mustPort(t *testing.T, p string) uint16 {
	n, err := strconv.ParseUint(p, 10, 16)
	require.NoError(t, err)
	return uint16(n)
}
