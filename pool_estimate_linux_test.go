package intents

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/estimate"
	"github.com/sockintents/intents/internal/tcpinfo"
	"github.com/sockintents/intents/internal/testbed"
)

// A pooled connection's smoothed RTT holds the queue its transfers built;
// the kernel's minimum over every acknowledgment it timed does not, and it
// is what the path's minimum RTT takes.
func TestSampleTCPTakesTheKernelsMinimumRTT(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	testbed.Serve(t, l, func(c net.Conn) { _, _ = io.Copy(c, c) })
	c, err := net.Dial("tcp4", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()

	// Round trips of growing size: each echo is timed, and the large
	// ones take longer than the first, so the smoothed RTT ends above
	// the minimum.
	kernel := func() tcpinfo.Info {
		rc, err := c.(*net.TCPConn).SyscallConn()
		require.NoError(t, err)
		info, err := tcpinfo.Get(rc)
		require.NoError(t, err)
		return info
	}
	buf := make([]byte, 1<<20)
	for size := 1; size <= len(buf); size *= 4 {
		if info := kernel(); info.MinRTT < info.RTT {
			break
		}
		written := make(chan error, 1)
		go func() { _, err := c.Write(buf[:size]); written <- err }()
		_, err = io.ReadFull(c, make([]byte, size))
		require.NoError(t, err)
		require.NoError(t, <-written)
	}
	before := kernel()
	require.Less(t, before.MinRTT, before.RTT, "the echoes left the smoothed RTT above the minimum")

	p := &Path{Name: "lo", est: estimate.New(0, 0)}
	_, ok := sampleTCP(&entry{path: p, raw: c})
	require.True(t, ok)
	after := kernel()
	s := p.est.Snapshot()
	assert.Equal(t, after.MinRTT, s.MinRTT, "the path's minimum is the connection's (smoothed %v)", after.RTT)
	assert.Equal(t, before.RTT, s.RTT, "the smoothed RTT is the kernel's smoothed one")
}
