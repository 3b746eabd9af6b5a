package tcpinfo

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGetOnLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s := <-accepted
	defer s.Close()
	_, err = c.Write(make([]byte, 100000))
	require.NoError(t, err)
	_, err = s.Read(make([]byte, 10))
	require.NoError(t, err)
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	info, err := Get(rc)
	require.NoError(t, err)
	assert.Positive(t, info.RTT, "the handshake gave an RTT sample")
	assert.Positive(t, info.DataSegsOut)
}
