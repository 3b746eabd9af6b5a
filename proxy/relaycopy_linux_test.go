package proxy

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpPair is the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	a, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	b, err := l.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// Between two TCP sockets the relay splices: the bytes arrive whole and in
// order through a reader slower than the writer (the relay waits for
// room), no byte passes through user space, and no pipe stays lent once
// the copy ends.
func TestRelayCopySplicesBetweenSockets(t *testing.T) {
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	want := make([]byte, 16<<20)
	rand.Read(want)
	spliced := relaySpliced.Load()
	copied := make(chan int64, 1)
	go func() {
		n, err := relayCopy(dstW, srcR)
		assert.NoError(t, err)
		dstW.CloseWrite()
		copied <- n
	}()
	go func() {
		srcW.Write(want)
		srcW.CloseWrite()
	}()
	var got bytes.Buffer
	buf := make([]byte, 1<<10)
	for {
		n, err := dstR.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	assert.Equal(t, int64(len(want)), <-copied)
	assert.True(t, bytes.Equal(want, got.Bytes()), "byte for byte")
	assert.Equal(t, int64(len(want)), relaySpliced.Load()-spliced, "every byte spliced")
	assert.Zero(t, relayPipesOut.Load(), "pipes lent after the copy")
}

// A copy that fails (here at a read deadline) returns its pipe and says
// why; a copy between ends that are not both TCP sockets is not spliced
// and moves every byte all the same.
func TestRelayCopyEndsAndFallsBack(t *testing.T) {
	_, srcR := tcpPair(t)
	dstW, _ := tcpPair(t)
	srcR.SetReadDeadline(time.Now())
	_, err := relayCopy(dstW, srcR)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.Zero(t, relayPipesOut.Load(), "pipes lent after a failed copy")

	spliced := relaySpliced.Load()
	var got bytes.Buffer
	n, err := relayCopy(&got, bytes.NewReader([]byte("not a socket")))
	require.NoError(t, err)
	assert.Equal(t, int64(12), n)
	assert.Equal(t, "not a socket", got.String())
	assert.Equal(t, spliced, relaySpliced.Load(), "nothing spliced")
}
