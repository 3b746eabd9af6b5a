package mptcp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sockintents/intents/internal/testbed"
)

func TestEndpointEncodingRoundTrip(t *testing.T) {
	for _, e := range []Endpoint{
		{ID: 3, Addr: netip.MustParseAddr("10.71.2.1"), Flags: Subflow | Backup, IfIndex: 5},
		{Addr: netip.MustParseAddr("2001:db8::7"), Port: 8443, Flags: Signal},
	} {
		b, err := encodeEndpointMessage(e)
		require.NoError(t, err)
		got, err := decodeEndpointMessage(b)
		require.NoError(t, err)
		assert.Equal(t, e, got)
	}
	l := Limits{Subflows: 2, AddAddrAccepted: 4}
	b, err := encodeLimits(l)
	require.NoError(t, err)
	got, err := decodeLimits(b)
	require.NoError(t, err)
	assert.Equal(t, l, got)
}

// The message `ip mptcp endpoint add 10.0.0.1 dev if5 subflow backup id 9`
// sends, built by hand from linux/mptcp_pm.h.
func handBuiltEndpoint() []byte {
	attr := func(typ uint16, data []byte) []byte {
		n := 4 + len(data)
		b := make([]byte, (n+3)&^3)
		binary.NativeEndian.PutUint16(b[0:], uint16(n))
		binary.NativeEndian.PutUint16(b[2:], typ)
		copy(b[4:], data)
		return b
	}
	u16 := func(v uint16) []byte { b := make([]byte, 2); binary.NativeEndian.PutUint16(b, v); return b }
	u32 := func(v uint32) []byte { b := make([]byte, 4); binary.NativeEndian.PutUint32(b, v); return b }
	var inner []byte
	inner = append(inner, attr(1, u16(unix.AF_INET))...)
	inner = append(inner, attr(2, []byte{9})...)
	inner = append(inner, attr(3, []byte{10, 0, 0, 1})...)
	inner = append(inner, attr(6, u32(2|4))...)
	inner = append(inner, attr(7, u32(5))...)
	return attr(1|netlink.Nested, inner)
}

func TestDecodeHandBuiltEndpoint(t *testing.T) {
	e, err := decodeEndpointMessage(handBuiltEndpoint())
	require.NoError(t, err)
	assert.Equal(t, Endpoint{ID: 9, Addr: netip.MustParseAddr("10.0.0.1"), Flags: Subflow | Backup, IfIndex: 5}, e)
	assert.Equal(t, "subflow,backup", e.Flags.String())

	_, err = decodeEndpointMessage([]byte{8, 0, 2, 0, 1, 0, 0, 0}) // a subflows limit, no address
	assert.Error(t, err)
	_, err = decodeEndpointMessage([]byte{200, 0, 1, 0})
	assert.Error(t, err, "a length past the end")
}

func FuzzDecodeEndpoint(f *testing.F) {
	f.Add(handBuiltEndpoint())
	b, _ := encodeEndpointMessage(Endpoint{Addr: netip.MustParseAddr("2001:db8::1"), Port: 1, Flags: Fullmesh})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEndpointMessage(b)
		if err != nil {
			return
		}
		// What decodes, encodes and decodes the same.
		again, err := encodeEndpointMessage(e)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := decodeEndpointMessage(again)
		if err != nil || e2 != e {
			t.Fatalf("%+v → %+v, %v", e, e2, err)
		}
	})
}

func TestParseSubflowAddrs(t *testing.T) {
	b := make([]byte, subflowDataSize+2*subflowAddrsSize)
	binary.NativeEndian.PutUint32(b[0:], subflowDataSize)
	binary.NativeEndian.PutUint32(b[4:], 2)
	binary.NativeEndian.PutUint32(b[8:], subflowAddrsSize)
	binary.NativeEndian.PutUint32(b[12:], subflowAddrsSize)
	put4 := func(off int, a string, port uint16) {
		binary.NativeEndian.PutUint16(b[off:], unix.AF_INET)
		binary.BigEndian.PutUint16(b[off+2:], port)
		ip := netip.MustParseAddr(a).As4()
		copy(b[off+4:], ip[:])
	}
	put4(16, "10.71.1.1", 40000)
	put4(16+128, "10.71.100.1", 80)
	put4(16+256, "10.71.2.1", 40001)
	put4(16+256+128, "10.71.100.1", 80)
	got, err := parseSubflowAddrs(b)
	require.NoError(t, err)
	assert.Equal(t, []AddrPair{
		{netip.MustParseAddrPort("10.71.1.1:40000"), netip.MustParseAddrPort("10.71.100.1:80")},
		{netip.MustParseAddrPort("10.71.2.1:40001"), netip.MustParseAddrPort("10.71.100.1:80")},
	}, got)
	_, err = parseSubflowAddrs(b[:8])
	assert.Error(t, err)
}

func serve(t *testing.T, mptcp bool) net.Listener {
	var lc net.ListenConfig
	lc.SetMultipathTCP(mptcp)
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	testbed.Serve(t, l, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	return l
}

func TestConnInfoOnLoopback(t *testing.T) {
	if err := Supported(); err != nil {
		t.Skip(err)
	}
	var d net.Dialer
	d.SetMultipathTCP(true)
	c, err := d.Dial("tcp", serve(t, true).Addr().String())
	require.NoError(t, err)
	defer c.Close()
	info, err := ConnInfo(c.(*net.TCPConn))
	require.NoError(t, err)
	assert.Zero(t, info.Subflows, "no extra subflows on loopback")
	require.Len(t, info.SubflowAddrs, 1)
	assert.Equal(t, c.LocalAddr().String(), info.SubflowAddrs[0].Local.String())
	assert.Equal(t, c.RemoteAddr().String(), info.SubflowAddrs[0].Remote.String())
	ok, err := Is(c.(*net.TCPConn))
	assert.True(t, ok)
	assert.NoError(t, err)
}

func TestFallbackIsReported(t *testing.T) {
	if err := Supported(); err != nil {
		t.Skip(err)
	}
	var d net.Dialer
	d.SetMultipathTCP(true)
	c, err := d.Dial("tcp", serve(t, false).Addr().String()) // a server without MPTCP
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("still works"))
	require.NoError(t, err)
	_, err = ConnInfo(c.(*net.TCPConn))
	assert.ErrorIs(t, err, ErrFallback)
	ok, err := Is(c.(*net.TCPConn))
	assert.False(t, ok)
	assert.NoError(t, err)

	plain, err := net.Dial("tcp", serve(t, true).Addr().String())
	require.NoError(t, err)
	defer plain.Close()
	_, err = ConnInfo(plain.(*net.TCPConn))
	assert.ErrorContains(t, err, "not an MPTCP socket")
}

// TestPathManagerRoundTrip adds, lists and deletes endpoints and sets
// limits in a namespace of its own, and leaves nothing behind.
func TestPathManagerRoundTrip(t *testing.T) {
	ns := testbed.NewNetns(t, "pm")
	ns.MustIP(t, "link", "add", "m0", "type", "veth", "peer", "name", "m1")
	ns.MustIP(t, "addr", "add", "10.72.0.1/24", "dev", "m0")
	ns.MustIP(t, "link", "set", "m0", "up")
	var pm *PM
	require.NoError(t, ns.Do(func() error {
		var err error
		pm, err = OpenPM() // its socket stays in the namespace
		return err
	}))
	defer pm.Close()
	ifi := 0
	require.NoError(t, ns.Do(func() error {
		i, err := net.InterfaceByName("m0")
		if err == nil {
			ifi = i.Index
		}
		return err
	}))

	before, err := pm.Endpoints()
	require.NoError(t, err)
	assert.Empty(t, before, "a new namespace has no endpoints")
	require.NoError(t, pm.AddEndpoint(Endpoint{ID: 7, Addr: netip.MustParseAddr("10.72.0.1"), Flags: Subflow | Backup, IfIndex: ifi}))
	got, err := pm.Endpoints()
	require.NoError(t, err)
	assert.Equal(t, []Endpoint{{ID: 7, Addr: netip.MustParseAddr("10.72.0.1"), Flags: Subflow | Backup, IfIndex: ifi}}, got)
	out, err := run("ip", "-n", ns.Name, "mptcp", "endpoint", "show")
	require.NoError(t, err)
	assert.Contains(t, out, "10.72.0.1 id 7 subflow backup dev m0", "iproute2 sees what we added")

	// Flags by address: backup off, and back on by ID.
	require.NoError(t, pm.SetFlags(Endpoint{Addr: netip.MustParseAddr("10.72.0.1"), Flags: Subflow}))
	got, err = pm.Endpoints()
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, Subflow, got[0].Flags, "backup cleared")
	require.NoError(t, pm.SetFlags(Endpoint{ID: 7, Flags: Subflow | Backup}))
	out, err = run("ip", "-n", ns.Name, "mptcp", "endpoint", "show")
	require.NoError(t, err)
	assert.Contains(t, out, "10.72.0.1 id 7 subflow backup dev m0", "backup set again, by ID")
	assert.Error(t, pm.SetFlags(Endpoint{Addr: netip.MustParseAddr("10.72.0.9"), Flags: Backup}), "no such endpoint")

	require.NoError(t, pm.SetLimits(Limits{Subflows: 3, AddAddrAccepted: 2}))
	l, err := pm.Limits()
	require.NoError(t, err)
	assert.Equal(t, Limits{Subflows: 3, AddAddrAccepted: 2}, l)

	require.NoError(t, pm.DeleteEndpoint(7))
	got, err = pm.Endpoints()
	require.NoError(t, err)
	assert.Empty(t, got, "nothing left behind")
	err = pm.DeleteEndpoint(7)
	assert.Error(t, err, "deleting what is not there fails")

	added, err := pm.EnsureEndpoints(map[netip.Addr]int{netip.MustParseAddr("10.72.0.1"): ifi}, Subflow)
	require.NoError(t, err)
	require.Len(t, added, 1)
	assert.NotZero(t, added[0].ID, "the kernel's ID is reported")
	again, err := pm.EnsureEndpoints(map[netip.Addr]int{netip.MustParseAddr("10.72.0.1"): ifi}, Subflow)
	require.NoError(t, err)
	assert.Empty(t, again, "idempotent")
	require.NoError(t, pm.DeleteEndpoint(added[0].ID))
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
