package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// net/http builds an HTTP/2 request's URL from :path alone and drops
// :scheme, so a handler cannot tell a proxy request for an https origin
// (which must be fetched over TLS) from one for an http origin. A
// schemeConn reads the client's frames beside the HTTP/2 server, with a
// decoder of its own, and keeps each request's pseudo-header fields, for
// the handler to find its request's scheme by its method, authority and
// path.
type schemeConn struct {
	*tls.Conn

	preface int // bytes of the client preface still to pass
	head    [9]byte
	headN   int
	left    int // bytes of the current frame's payload still to come
	typ     http2.FrameType
	flags   http2.Flags
	stream  uint32
	payload []byte // a HEADERS or CONTINUATION frame's payload
	block   int    // bytes of the current header block so far
	fields  h2Request
	dec     *hpack.Decoder
	broken  bool // the stream could not be followed: no scheme is told

	blockFrames int       // frames of the current header block
	resets      float64   // resets the client may still send at once
	resetAt     time.Time // when resets was last topped up
	flood       bool      // the client floods: the connection ends

	mu      sync.Mutex
	pending []h2Request // decoded, not yet looked up; oldest first
	held    int         // the bytes of pending's fields
}

// Floods the HTTP/2 server takes without closing the connection, closed
// here: a header block strung out over empty CONTINUATION frames (the
// server bounds a block's bytes, not its frames), and streams opened and
// reset at once (the server bounds the handlers it runs, not the resets
// it processes). A browser sends a header block in one or two frames and
// resets streams a page at a time.
const (
	// maxBlockFrames bounds the frames of one header block: a block of
	// maxHeaderBlock bytes in the smallest frames a client may send (16
	// kB) takes 64.
	maxBlockFrames = 128
	// maxResetBurst resets at once, then resetsPerSecond, are allowed a
	// client; beyond, its connection is closed.
	maxResetBurst   = 512
	resetsPerSecond = 128
)

// errHTTP2Flood closes the connection of a client that floods the server
// (see maxBlockFrames).
var errHTTP2Flood = errors.New("proxy: HTTP/2 client flooding: too many CONTINUATION or RST_STREAM frames")

// h2Request is what a request's pseudo-header fields say.
type h2Request struct{ method, scheme, authority, path string }

const (
	// maxHeaderBlock bounds a header block followed; the server refuses
	// far smaller ones (MaxHeaderBytes).
	maxHeaderBlock = 1 << 20
	// maxPending and maxPendingBytes bound the requests kept for lookup
	// on one connection (the server runs at most a few hundred streams at
	// once, and never runs those it refuses, whose fields would else stay).
	maxPending      = 1024
	maxPendingBytes = 128 << 10
)

func newSchemeConn(c *tls.Conn) *schemeConn {
	sc := &schemeConn{Conn: c, preface: len(http2.ClientPreface), resets: maxResetBurst, resetAt: time.Now()}
	// The table size the server announces (its default: the protocol's).
	sc.dec = hpack.NewDecoder(4096, sc.emit)
	return sc
}

func (c *schemeConn) Read(p []byte) (int, error) {
	if c.flood {
		return 0, errHTTP2Flood
	}
	n, err := c.Conn.Read(p)
	if !c.broken {
		c.follow(p[:n])
	}
	if c.flood {
		return 0, errHTTP2Flood // what came with the flood is not served
	}
	return n, err
}

// NetConn is the TLS connection under the watch.
func (c *schemeConn) NetConn() net.Conn { return c.Conn }

// follow parses b, the next bytes from the client, frame by frame.
func (c *schemeConn) follow(b []byte) {
	for len(b) > 0 && !c.broken && !c.flood {
		switch {
		case c.preface > 0:
			k := min(c.preface, len(b))
			c.preface -= k
			b = b[k:]
		case c.left == 0 && c.headN < len(c.head):
			k := copy(c.head[c.headN:], b)
			c.headN += k
			b = b[k:]
			if c.headN == len(c.head) {
				c.left = int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
				c.typ, c.flags = http2.FrameType(c.head[3]), http2.Flags(c.head[4])
				c.stream = binary.BigEndian.Uint32(c.head[5:]) & (1<<31 - 1)
				c.payload = c.payload[:0]
				if c.left == 0 {
					c.endFrame()
				}
			}
		default:
			k := min(c.left, len(b))
			if c.typ == http2.FrameHeaders || c.typ == http2.FrameContinuation {
				if c.block += k; c.block > maxHeaderBlock {
					c.broken = true
					return
				}
				c.payload = append(c.payload, b[:k]...)
			}
			c.left -= k
			b = b[k:]
			if c.left == 0 {
				c.endFrame()
			}
		}
	}
}

// endFrame ends a frame whose payload is all in.
func (c *schemeConn) endFrame() {
	c.headN = 0
	frag := c.payload
	switch c.typ {
	case http2.FrameRSTStream:
		now := time.Now()
		c.resets = min(maxResetBurst, c.resets+now.Sub(c.resetAt).Seconds()*resetsPerSecond)
		c.resetAt = now
		if c.resets--; c.resets < 0 {
			c.flood = true
		}
		return
	case http2.FrameHeaders:
		c.blockFrames = 0
		c.fields = h2Request{}
		if c.flags.Has(http2.FlagHeadersPadded) {
			if len(frag) < 1 || int(frag[0]) > len(frag)-1 {
				c.broken = true
				return
			}
			frag = frag[1 : len(frag)-int(frag[0])]
		}
		if c.flags.Has(http2.FlagHeadersPriority) {
			if len(frag) < 5 {
				c.broken = true
				return
			}
			frag = frag[5:]
		}
	case http2.FrameContinuation:
	default:
		return
	}
	if c.blockFrames++; c.blockFrames > maxBlockFrames {
		c.flood = true
		return
	}
	if _, err := c.dec.Write(frag); err != nil {
		c.broken = true
		return
	}
	if c.typ == http2.FrameHeaders && !c.flags.Has(http2.FlagHeadersEndHeaders) ||
		c.typ == http2.FrameContinuation && !c.flags.Has(http2.FlagContinuationEndHeaders) {
		return
	}
	c.block = 0
	if err := c.dec.Close(); err != nil {
		c.broken = true
		return
	}
	if c.fields.method == "" || c.fields.method == http.MethodConnect {
		return // trailers, or a tunnel
	}
	size := c.fields.size()
	if size > DefaultMaxHeaderBytes {
		return // more than the server takes: never looked up
	}
	c.mu.Lock()
	for len(c.pending) > 0 && (len(c.pending) >= maxPending || c.held+size > maxPendingBytes) {
		c.held -= c.pending[0].size()
		c.pending = c.pending[1:]
	}
	c.pending = append(c.pending, c.fields)
	c.held += size
	c.mu.Unlock()
}

func (r h2Request) size() int { return len(r.method) + len(r.scheme) + len(r.authority) + len(r.path) }

func (c *schemeConn) emit(f hpack.HeaderField) {
	switch f.Name {
	case ":method":
		c.fields.method = f.Value
	case ":scheme":
		c.fields.scheme = f.Value
	case ":authority":
		c.fields.authority = f.Value
	case ":path":
		c.fields.path = f.Value
	}
}

// scheme is the :scheme of r, a request read from this connection; ""
// if it cannot be told: not found, or two pending requests alike but for
// their schemes.
func (c *schemeConn) scheme(r *http.Request) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	found, scheme := -1, ""
	for i, p := range c.pending {
		if p.method != r.Method || p.authority != r.Host || p.path != r.RequestURI {
			continue
		}
		if found < 0 {
			found, scheme = i, p.scheme
		} else if p.scheme != scheme {
			scheme = ""
		}
	}
	if found >= 0 {
		c.held -= c.pending[found].size()
		c.pending = append(c.pending[:found], c.pending[found+1:]...)
	}
	return scheme
}

// schemeConnKey carries an HTTP/2 connection's schemeConn to its
// requests.
type schemeConnKey struct{}

// serveHTTP2 serves an HTTP/2 client of hs (net/http's TLSNextProto
// hook) with golang.org/x/net/http2's server over a schemeConn, so that
// its requests' schemes are known.
func serveHTTP2(h2 *http2.Server) func(*http.Server, *tls.Conn, http.Handler) {
	return func(hs *http.Server, c *tls.Conn, h http.Handler) {
		ctx := context.Background()
		if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
			ctx = bc.BaseContext() // the connection's, as net/http made it
		}
		sc := newSchemeConn(c)
		h2.ServeConn(sc, &http2.ServeConnOpts{Context: context.WithValue(ctx, schemeConnKey{}, sc), Handler: h, BaseConfig: hs})
	}
}

// requestScheme is the scheme an HTTP/2 proxy request asked for: "http"
// or "https", or "" if it cannot be told.
func requestScheme(r *http.Request) string {
	sc, ok := r.Context().Value(schemeConnKey{}).(*schemeConn)
	if !ok {
		return "http" // HTTP/2 not from a TLS listener of the Server's
	}
	return sc.scheme(r)
}
