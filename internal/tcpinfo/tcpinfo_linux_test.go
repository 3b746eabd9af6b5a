package tcpinfo

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loopbackPair returns both ends of a TCP connection over loopback,
// closed when t ends.
func loopbackPair(t *testing.T) (client, server net.Conn) {
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
	t.Cleanup(func() { c.Close() })
	s := <-accepted
	t.Cleanup(func() { s.Close() })
	return c, s
}

func TestGetOnLoopback(t *testing.T) {
	c, s := loopbackPair(t)
	_, err := c.Write(make([]byte, 100000))
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

// TestQuietAndUnread: a peer that sends and stops shows in LastDataRecv
// growing, and bytes not read yet in Unread.
func TestQuietAndUnread(t *testing.T) {
	c, s := loopbackPair(t)
	_, err := s.Write(make([]byte, 1000))
	require.NoError(t, err)
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	// Loopback delivers at once, but not synchronously: look when the
	// socket is readable (the poller says so), for at most the deadline.
	var info Info
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	var getErr error
	readErr := rc.Read(func(uintptr) bool {
		info, getErr = Get(rc)
		return getErr != nil || info.Unread >= 1000
	})
	require.NoError(t, readErr)
	require.NoError(t, getErr)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	assert.Equal(t, 1000, info.Unread)
	_, err = c.Read(make([]byte, 1000))
	require.NoError(t, err)
	info, err = Get(rc)
	require.NoError(t, err)
	assert.Zero(t, info.Unread)
	assert.Zero(t, info.Unacked, "nothing sent")
	assert.Zero(t, info.Timeouts)
	first := info.LastDataRecv
	// The clock of TCP_INFO runs in jiffies (at most 10 ms): look until it
	// moves on, for at most five seconds.
	for deadline := time.Now().Add(5 * time.Second); info.LastDataRecv <= first && time.Now().Before(deadline); {
		info, err = Get(rc)
		require.NoError(t, err)
		runtime.Gosched()
	}
	assert.Greater(t, info.LastDataRecv, first, "nothing arrived since")
}
