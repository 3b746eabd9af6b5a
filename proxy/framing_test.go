package proxy

import (
	"testing"

	"golang.org/x/net/http2"

	"github.com/stretchr/testify/assert"
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
		for i := range len(text) {
			whole.scan(text[i])
		}
		assert.Equal(t, want, whole.both.Load(), "%q", text)
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
