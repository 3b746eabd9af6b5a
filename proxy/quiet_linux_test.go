package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On Linux a tunnel's quiet time comes from the kernel, so that its
// copies keep splicing: a TCP socket answers, and a byte just sent makes
// it not quiet.
func TestKernelQuiet(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := l.Accept()
	require.NoError(t, err)
	defer s.Close()
	quiet, ok := kernelQuiet(c)
	require.True(t, ok, "TCP_INFO of a TCP socket")
	_, err = c.Write([]byte("x"))
	require.NoError(t, err)
	assert.Less(t, quiet(), time.Minute)
	_, ok = kernelQuiet(&net.UnixConn{})
	assert.False(t, ok)
}
