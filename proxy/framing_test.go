package proxy

import (
	"bytes"
	"crypto/rand"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The watch finds both fields in one head whatever their case and
// order, however the bytes arrive, and not across heads.
func TestFramingWatch(t *testing.T) {
	for text, want := range map[string]bool{
		"POST / HTTP/1.1\r\nTRANSFER-ENCODING: chunked\r\ncontent-length: 5\r\n\r\n":                             true,
		"POST / HTTP/1.1\r\nContent-Length: 5\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n":                  true,
		"POST / HTTP/1.1\nContent-Length: 5\nTransfer-Encoding: chunked\n\n":                                     true,
		"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloPOST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n": false,
		"POST / HTTP/1.1\r\nX-Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n":                           false,
	} {
		whole := &framingConn{}
		whole.watch([]byte(text))
		bytewise := &framingConn{}
		for i := range len(text) {
			bytewise.watch([]byte{text[i]})
		}
		assert.Equal(t, want, whole.both.Load(), "%q", text)
		assert.Equal(t, want, bytewise.both.Load(), "%q, a byte at a time", text)
	}
}

// Whatever a client sends, following its frames neither panics nor
// keeps more than its bounds.
func FuzzSchemeConn(f *testing.F) {
	f.Add([]byte(http2.ClientPreface+"\x00\x00\x05\x01\x05\x00\x00\x00\x01\x82\x87\x84\x41\x00"), 7)
	f.Add([]byte(http2.ClientPreface+"\x00\x00\x03\x01\x08\x00\x00\x00\x01\x09\x82\x84"), 1)
	f.Fuzz(func(t *testing.T, b []byte, chunk int) {
		c := newSchemeConn(nil)
		chunk = max(1, chunk%64)
		for len(b) > 0 {
			k := min(chunk, len(b))
			c.follow(b[:k])
			b = b[k:]
		}
		assert.LessOrEqual(t, len(c.pending), maxPending)
		assert.LessOrEqual(t, c.block, maxHeaderBlock)
	})
}

// A client that opens stream after stream the server never runs (each
// with a long path) leaves a bounded memory of their fields behind.
func TestSchemeConnPendingIsBounded(t *testing.T) {
	c := newSchemeConn(nil)
	c.follow([]byte(http2.ClientPreface))
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	long := "/" + strings.Repeat("a", 4<<10)
	for i := range 2000 {
		block.Reset()
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "example.com"}, {Name: ":path", Value: long + strconv.Itoa(i)}} {
			enc.WriteField(f)
		}
		var frame bytes.Buffer
		fr := http2.NewFramer(&frame, nil)
		require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block.Bytes(), EndHeaders: true}))
		c.follow(frame.Bytes())
	}
	require.False(t, c.broken)
	require.NotEmpty(t, c.pending, "followed")
	assert.LessOrEqual(t, c.held, 128<<10)
	held := 0
	for _, p := range c.pending {
		held += p.size()
	}
	assert.Equal(t, held, c.held, "the count matches the fields kept")
}

// BenchmarkFramingWatch is the watch's cost per byte a client sends: a
// 1 MB upload of random bytes, read as the server reads it.
func BenchmarkFramingWatch(b *testing.B) {
	body := make([]byte, 1<<20)
	rand.Read(body)
	b.SetBytes(int64(len(body)))
	c := &framingConn{line: make([]byte, 0, maxField)}
	for b.Loop() {
		for p := body; len(p) > 0; p = p[min(len(p), 32<<10):] {
			c.watch(p[:min(len(p), 32<<10)])
		}
	}
}
