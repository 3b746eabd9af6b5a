package intents_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsFastOpen: with Dialer.FastOpen, the second connection to a
// server that allows TFO carries its first write in the SYN.
func TestNetnsFastOpen(t *testing.T) {
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{testbed.Symmetric(40*time.Millisecond, 0)}, TFO: true})
	var l net.Listener
	require.NoError(t, tb.Server.Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_FASTOPEN, 16) })
			return err
		}}
		lc.SetMultipathTCP(false)
		var err error
		l, err = lc.Listen(context.Background(), "tcp", tb.Hosts[0].String()+":7000")
		return err
	}))
	testbed.Serve(t, l, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "got %s", line)
	})
	testbed.RunTest(t, tb.Client, "TestNetnsFastOpenChild", "tfo")
}

func TestNetnsFastOpenChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsFastOpen")
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}}, NoWatch: true})
	require.NoError(t, err)
	d := &intents.Dialer{Manager: m, FastOpen: true}
	ctx := intents.WithIntents(context.Background(), intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelRequire}})
	ask := func() (time.Duration, bool) {
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", "10.71.100.1:7000")
		require.NoError(t, err)
		defer c.Close()
		_, err = fmt.Fprintf(c, "hello\n")
		require.NoError(t, err)
		line, err := bufio.NewReader(c).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "got hello\n", line)
		took := time.Since(start)
		syn, err := c.(*intents.Conn).FastOpened()
		require.NoError(t, err)
		return took, syn
	}
	first, syn1 := ask()
	second, syn2 := ask()
	t.Logf("answer after %v without a cookie, %v with data in the SYN (path RTT 40 ms)", first.Round(time.Millisecond), second.Round(time.Millisecond))
	assert.False(t, syn1, "no cookie yet: an ordinary handshake")
	assert.True(t, syn2, "the second connection's request went in its SYN")
}
