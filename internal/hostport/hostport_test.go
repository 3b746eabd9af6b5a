package hostport

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		in        string
		def       uint16
		host      string
		port      uint16
		wantError bool
	}{
		{"example.com:8080", 0, "example.com", 8080, false},
		{"example.com:https", 0, "example.com", 443, false},
		{"[2001:db8::1]:443", 0, "2001:db8::1", 443, false},
		{"example.com", 80, "example.com", 80, false},
		{"[2001:db8::1]", 443, "2001:db8::1", 443, false},
		{"example.com", 0, "example.com", 0, true},
		{"example.com:99999", 80, "example.com", 0, true},
		{"example.com:nonsense-port", 80, "example.com", 0, true},
		{"2001:db8::1", 80, "2001:db8::1", 0, true},
	} {
		host, port, err := Split(context.Background(), "tcp", c.in, c.def)
		assert.Equal(t, c.host, host, c.in)
		assert.Equal(t, c.port, port, c.in)
		assert.Equal(t, c.wantError, err != nil, "%s: %v", c.in, err)
	}
}
