package intents

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sockintents/intents/internal/h3conn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeH3 is an HTTP/3 connection whose responses' bodies the test writes (one
// pipe per request path) and whose GOAWAY it sends.
type pipeH3 struct {
	pc     net.PacketConn
	goAway atomic.Bool
	closed atomic.Bool
	mu     sync.Mutex
	bodies map[string]*io.PipeWriter
}

func (c *pipeH3) RoundTrip(r *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	c.mu.Lock()
	c.bodies[r.URL.Path] = pw
	c.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/3.0", ProtoMajor: 3, Header: http.Header{},
		Body: pr, ContentLength: -1, Request: r}, nil
}

func (c *pipeH3) body(path string) *io.PipeWriter {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bodies[path]
}

func (c *pipeH3) Err() error {
	switch {
	case c.closed.Load():
		return net.ErrClosed
	case c.goAway.Load():
		return errors.New("GOAWAY")
	}
	return nil
}

// Close cuts every stream, as closing a QUIC connection does.
func (c *pipeH3) Close() error {
	c.closed.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pw := range c.bodies {
		pw.CloseWithError(errors.New("H3_NO_ERROR (local)"))
	}
	return c.pc.Close()
}

func (c *pipeH3) LocalAddr() net.Addr  { return c.pc.LocalAddr() }
func (c *pipeH3) RemoteAddr() net.Addr { return c.pc.LocalAddr() }
func (c *pipeH3) Stats() h3conn.Stats  { return h3conn.Stats{} }
func (c *pipeH3) Probe() error         { return nil }
func (c *pipeH3) AddPath(context.Context, net.PacketConn) (h3conn.Path, error) {
	return nil, errors.ErrUnsupported
}

type pipeH3Dialer struct{ conn *pipeH3 }

func (d *pipeH3Dialer) DialHTTP3(_ context.Context, pc net.PacketConn, _ netip.AddrPort, _ *tls.Config) (h3conn.Conn, error) {
	d.conn = &pipeH3{pc: pc, bodies: map[string]*io.PipeWriter{}}
	return d.conn, nil
}

// A GOAWAY on an HTTP/3 connection lets the streams in flight finish:
// the connection takes no new requests, and closes once the last one
// ended, not as the first of them ends.
func TestHTTP3GoAwayLetsStreamsFinish(t *testing.T) {
	d := &pipeH3Dialer{}
	tr := &Transport{HTTP3: d, HTTP3Always: true, HTTP3RaceDelay: -1}
	defer tr.Close()
	get := func(path string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1:4433"+path, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, 3, resp.ProtoMajor)
		return resp
	}
	a, b := get("/a"), get("/b")
	defer a.Body.Close()
	require.NotNil(t, d.conn.body("/a"))
	require.NotNil(t, d.conn.body("/b"), "both on the one connection")

	d.conn.goAway.Store(true)
	go func() {
		d.conn.body("/b").Write([]byte("b"))
		d.conn.body("/b").Close()
	}()
	got, err := io.ReadAll(b.Body)
	require.NoError(t, err)
	assert.Equal(t, "b", string(got))
	b.Body.Close() // the pool hears of it: one stream left
	assert.Equal(t, 1, tr.Stats()[""].Active, "the connection stays while a stream is in flight")

	go func() {
		d.conn.body("/a").Write([]byte(strings.Repeat("a", 100)))
		d.conn.body("/a").Close()
	}()
	got, err = io.ReadAll(a.Body)
	require.NoError(t, err, "the stream in flight at the GOAWAY finishes")
	assert.Len(t, got, 100)
}
