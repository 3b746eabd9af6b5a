package intents

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// silentPeer returns a loopback address whose listener drops every SYN: its
// accept queue (backlog 0) is full with one connection nobody accepts.
func silentPeer(t *testing.T) netip.AddrPort {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.Dial("tcp", addr.String())
	require.NoError(t, err)
	t.Cleanup(func() { filler.Close() })
	return addr
}

// A path is probed through the silent peer and its DNS servers at once:
// one answering is enough, none answering is no answer.
func TestPathAnswersThroughAnyTarget(t *testing.T) {
	silent := silentPeer(t)
	l := listen(t, "tcp4", "127.0.0.1:0")
	up := netip.MustParseAddrPort(l.Addr().String())
	c := newCore(loManager(t, nil), coreConfig{})
	defer c.close()
	p := c.m.Paths()[0]

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	assert.False(t, c.health.pathAnswers(ctx, p, []netip.AddrPort{silent}), "a peer that drops the SYN does not answer")
	assert.True(t, c.health.pathAnswers(context.Background(), p, []netip.AddrPort{silent, up}), "another target on the path does")
}
