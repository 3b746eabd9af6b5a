package proxy

import (
	"testing"

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
