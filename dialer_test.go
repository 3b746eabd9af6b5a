package intents

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// listen accepts connections on network/addr and writes "hello" to each.
func listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s %s: %v", network, addr, err)
	}
	testbed.Serve(t, l, func(c net.Conn) { _, _ = io.WriteString(c, "hello") })
	return l
}

func TestZeroDialerIsNetDialer(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	var d Dialer
	c, err := d.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	assert.IsType(t, &net.TCPConn{}, c)
	p, b := PathOf(c)
	assert.Nil(t, p)
	assert.Equal(t, BindNone, b)

	_, err = d.Dial("tcp", "127.0.0.1:1")
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
}

func loManager(t *testing.T, policy Policy) *Manager {
	t.Helper()
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: loopbackName(t)}}, Policy: policy, NoWatch: true})
	require.NoError(t, err)
	return m
}

func TestDialerLoopbackDestinations(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(l.Addr().String())
	d := Dialer{Manager: loManager(t, nil)}
	ctx := WithIntents(context.Background(), Intents{Types: map[InterfaceType]Level{TypeWifi: LevelPrefer}})
	for _, host := range []string{"127.0.0.1", "localhost"} {
		c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort(host, port))
		require.NoError(t, err, host)
		c.Close()
	}
	ctx = WithIntents(ctx, Intents{Types: map[InterfaceType]Level{TypeLoopback: LevelProhibit}})
	_, err := d.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port))
	assert.ErrorIs(t, err, ErrNoPath)
}

// tripwire is a Control that fails, before any packet is sent, every
// connection to a non-loopback address: tests send traffic only to
// loopback or to namespaces they made.
func tripwire(t *testing.T) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().IsLoopback() {
			t.Errorf("tried to connect to %s %s", network, address)
			return errors.New("tripwire: not a loopback address")
		}
		return nil
	}
}

func TestDialerNoPermittedPath(t *testing.T) {
	d := Dialer{Manager: loManager(t, nil), Control: tripwire(t)}
	_, err := d.DialContext(context.Background(), "tcp", "192.0.2.1:80")
	var npe *NoPathError
	require.ErrorAs(t, err, &npe)
	assert.Equal(t, "192.0.2.1:80", npe.Dest)
	assert.Equal(t, "loopback cannot reach the destination", npe.Excluded[0].Reason)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "dial", oe.Op)
}

func TestPlanIgnoresChoicesOfExcludedPaths(t *testing.T) {
	rogue := &Path{Name: "rogue", Type: TypeWired, Up: true, Addrs: []netip.Addr{netip.MustParseAddr("10.9.9.9")}}
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		d.Choices = append(d.Choices, Choice{Path: rogue}, Choice{Wait: true})
		d.Reason = "rogue"
	}))
	paths := []*Path{rogue}
	m.paths.Store(&paths)
	ctx := WithIntents(context.Background(), Intents{Interfaces: map[string]Level{"rogue": LevelProhibit}})
	_, err := m.plan(ctx, "tcp", "192.0.2.1", 80, false)
	require.ErrorIs(t, err, ErrNoPath)
	assert.Contains(t, err.Error(), "rogue: prohibited")

	// A path that is permitted but not the one handed to the policy is
	// refused too: policies choose from Request.Paths only.
	other := *rogue
	_, err = loManagerWith(t, &other, rogue).plan(context.Background(), "tcp", "192.0.2.1", 80, false)
	assert.ErrorContains(t, err, "policy chose no permitted path: rogue")
}

func loManagerWith(t *testing.T, table *Path, chosen *Path) *Manager {
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		d.Choices = append(d.Choices, Choice{Path: chosen})
		d.Reason = "rogue"
	}))
	paths := []*Path{table}
	m.paths.Store(&paths)
	return m
}

// loPathBoth is the loopback path with both families.
func loPathBoth(t *testing.T) *Path {
	name := loopbackName(t)
	ifi, err := net.InterfaceByName(name)
	require.NoError(t, err)
	return &Path{Name: name, Index: ifi.Index, Type: TypeLoopback, Up: true,
		Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}}
}

func TestDialPathHappyEyeballsFallsBack(t *testing.T) {
	l := listen(t, "tcp6", "[::1]:0")
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	m := loManager(t, nil)
	p := loPathBoth(t)
	d := &Dialer{FallbackDelay: time.Hour} // the fallback must start because the primary failed, not by timer
	// 127.0.0.1 first: nothing listens there on this port, so IPv6 serves.
	c, err := pathDial{Dialer: d, network: "tcp", port: port, path: p}.parallel(context.Background(),
		[]netip.Addr{netip.MustParseAddr("127.0.0.1")}, []netip.Addr{netip.MustParseAddr("::1")})
	require.NoError(t, err)
	defer c.Close()
	got, binding := PathOf(c)
	assert.Same(t, p, got)
	assert.Equal(t, expectedBinding(t), binding)
	assert.Equal(t, "::1", c.LocalAddr().(*net.TCPAddr).IP.String())
	_ = m
}

func TestDialPathFiltersFamilies(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	p := loPathBoth(t)
	p.Addrs = p.Addrs[:1] // IPv4 only
	d := &Dialer{}
	c, err := d.dialPath(context.Background(), loManager(t, nil), "tcp", "127.0.0.1", port, p, 0)
	require.NoError(t, err)
	c.Close()
	_, err = d.dialPath(context.Background(), loManager(t, nil), "tcp", "::1", port, p, 0)
	assert.ErrorContains(t, err, "has no address on path")
}

func TestConnPassesThrough(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	p := loPathBoth(t)
	var controlled bool
	d := &Dialer{Control: func(network, address string, c syscall.RawConn) error {
		controlled = true
		return nil
	}}
	c, err := d.dialPath(context.Background(), loManager(t, nil), "tcp", "127.0.0.1", port, p, 0)
	require.NoError(t, err)
	defer c.Close()
	assert.True(t, controlled, "the user's Control still runs")
	conn := c.(*Conn)
	assert.IsType(t, &net.TCPConn{}, conn.NetConn())
	var sb strings.Builder
	n, err := io.Copy(&sb, conn)
	require.NoError(t, err)
	assert.EqualValues(t, 5, n)
	assert.Equal(t, "hello", sb.String())
	require.NoError(t, conn.CloseWrite())
	_, err = conn.SyscallConn()
	assert.NoError(t, err)
}

func TestDialerControlErrorAborts(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	boom := errors.New("boom")
	d := &Dialer{ControlContext: func(context.Context, string, string, syscall.RawConn) error { return boom }}
	_, err := d.dialPath(context.Background(), loManager(t, nil), "tcp", "127.0.0.1", port, loPathBoth(t), 0)
	assert.ErrorIs(t, err, boom)
}

func TestDialerTimeout(t *testing.T) {
	d := &Dialer{Timeout: time.Nanosecond}
	ctx := WithIntents(context.Background(), Intents{Types: map[InterfaceType]Level{TypeWifi: LevelPrefer}})
	d.Manager = loManager(t, nil)
	_, err := d.DialContext(ctx, "tcp", "127.0.0.1:9")
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.True(t, oe.Timeout(), "%v", err)
}

// A dial whose every path failed says how each failed, by path, and, as
// net's errors do, where the first failed connection was from and to.
func TestDialErrorOfSeveralPaths(t *testing.T) {
	refused := func(src, dst string) error {
		return &net.OpError{Op: "dial", Net: "tcp", Source: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(src)),
			Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(dst)), Err: syscall.ECONNREFUSED}
	}
	noAddr := errors.New("no address of the path's families")
	err := pathsError("dial", "tcp", []*PathError{
		{Path: "wifi", Err: noAddr},
		{Path: "lte", Err: refused("10.1.0.2:0", "192.0.2.7:443")},
		{Path: "eth", Err: refused("10.2.0.2:0", "192.0.2.7:443")},
	})
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "dial", oe.Op)
	assert.Equal(t, "10.1.0.2:0", oe.Source.String(), "the first failed connection's source")
	assert.Equal(t, "192.0.2.7:443", oe.Addr.String())
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.ErrorIs(t, err, noAddr)
	for _, p := range []string{"wifi", "lte", "eth"} {
		assert.Contains(t, err.Error(), p, "every path's failure is told")
	}
}
