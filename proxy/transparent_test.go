package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
)

// sniffFrom has a client send what send writes on a loopback connection
// and returns what sniffName finds on the server's end, and what the
// client wrote.
func sniffFrom(t *testing.T, send func(net.Conn)) (string, []byte, []byte) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	var sent bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		send(&sentConn{Conn: c, w: &sent})
	}()
	srv, err := l.Accept()
	require.NoError(t, err)
	defer srv.Close()
	name, head := sniffName(srv, 2*time.Second)
	c.Close()
	<-done
	return name, head, sent.Bytes()
}

// sentConn keeps what is written to it.
type sentConn struct {
	net.Conn
	w *bytes.Buffer
}

func (c *sentConn) Write(p []byte) (int, error) {
	c.w.Write(p)
	return c.Conn.Write(p)
}

// A redirected connection's name comes from its TLS ClientHello or its
// HTTP request's Host; what was read to find it is kept, byte for byte,
// to be sent on; a connection that says nothing first, or carries no
// name, is placed by its address.
func TestSniffName(t *testing.T) {
	name, head, sent := sniffFrom(t, func(c net.Conn) {
		tls.Client(c, &tls.Config{ServerName: "WWW.Example.COM"}).Handshake()
	})
	assert.Equal(t, "www.example.com", name)
	assert.NotEmpty(t, head)
	assert.Equal(t, sent[:len(head)], head, "what was read, byte for byte")

	request := "GET /x HTTP/1.1\r\nHost: Example.org.:8080\r\nUser-Agent: t\r\n\r\n"
	name, head, _ = sniffFrom(t, func(c net.Conn) { io.WriteString(c, request) })
	assert.Equal(t, "example.org", name)
	assert.Equal(t, request, string(head))

	for what, send := range map[string]func(net.Conn){
		"nothing first":  func(c net.Conn) { time.Sleep(2 * sniffWait); c.Write([]byte("220 ")) }, // a server-first protocol's client, which waits
		"an address":     func(c net.Conn) { io.WriteString(c, "GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n") },
		"no known start": func(c net.Conn) { io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\n") },
		"TLS, no name":   func(c net.Conn) { tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake() },
	} {
		name, _, _ := sniffFrom(t, send)
		assert.Empty(t, name, what)
	}
}

// A client that came to the transparent listener itself, not redirected
// there, is closed: its destination is the proxy. Where the system
// cannot tell original destinations, ServeTransparent says so at once.
func TestTransparentRefusesDirectClients(t *testing.T) {
	p := newTestProxy(t, intents.Intents{}, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- p.ServeTransparent(l, intents.Intents{}) }()
	if !originalDstSupported {
		assert.ErrorIs(t, <-served, ErrTransparentUnsupported)
		return
	}
	t.Cleanup(func() {
		p.Close()
		assert.ErrorIs(t, <-served, ErrServerClosed)
	})
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "closed, not relayed to itself: %v", err)
}

// A redirected connection is placed by the name its first bytes carry
// only where that name leads to where the connection went: a program
// naming another host reaches, through the proxy, only the one it
// connected to.
func TestTransparentHostIsWhereTheConnectionWent(t *testing.T) {
	dst := netip.MustParseAddr("192.0.2.10")
	lookup := func(_ context.Context, name string) ([]netip.Addr, error) {
		switch name {
		case "www.example":
			return []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("::ffff:192.0.2.10")}, nil
		case "elsewhere.example":
			return []netip.Addr{netip.MustParseAddr("198.51.100.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	for name, want := range map[string]string{
		"www.example":       "www.example", // one of its addresses: each path resolves it
		"elsewhere.example": "192.0.2.10",  // another host's name: the address it went to
		"unknown.example":   "192.0.2.10",
		"":                  "192.0.2.10",
	} {
		assert.Equal(t, want, transparentHost(context.Background(), name, dst, lookup), "%q", name)
	}
}
