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

// A PacketConn is a *net.UDPConn to those who look for its methods, as
// quic-go does for ECN, GSO and buffer sizes.
var _ interface {
	SyscallConn() (syscall.RawConn, error)
	ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error)
	SetReadBuffer(int) error
} = (*PacketConn)(nil)

// udpEcho answers each datagram with the address it came from.
func udpEcho(t *testing.T) net.Addr {
	t.Helper()
	srv, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			_, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteTo([]byte(from.String()), from)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return srv.LocalAddr()
}

// roundTrip sends a datagram from pc to srv and returns the answer: the
// address the server saw.
func roundTrip(t *testing.T, pc net.PacketConn, srv net.Addr) string {
	t.Helper()
	require.NoError(t, pc.SetDeadline(time.Now().Add(5*time.Second)))
	_, err := pc.WriteTo([]byte("hello"), srv)
	require.NoError(t, err)
	buf := make([]byte, 1500)
	n, _, err := pc.ReadFrom(buf)
	require.NoError(t, err)
	return string(buf[:n])
}

// A socket on a loopback address is for loopback peers; the loopback path
// may be prohibited as for a dial.
func TestListenPacketLoopback(t *testing.T) {
	srv := udpEcho(t)
	m := loManager(t, nil)
	defer m.Close()
	d := Dialer{Manager: m}
	pc, err := d.ListenPacket(context.Background(), "udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	assert.Equal(t, pc.LocalAddr().String(), roundTrip(t, pc, srv))

	prohibit := WithIntents(context.Background(), Intents{Types: map[InterfaceType]Level{TypeLoopback: LevelProhibit}})
	_, err = d.ListenPacket(prohibit, "udp", "127.0.0.1:0")
	assert.ErrorIs(t, err, ErrNoPath)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "listen", oe.Op)
}

// What cannot be bound is a clear error, before any socket is made.
func TestListenPacketErrors(t *testing.T) {
	m := loManager(t, nil)
	defer m.Close()
	d := Dialer{Manager: m}
	for _, tc := range []struct{ network, address, want string }{
		{"udp", "localhost:0", "want an IP address"},
		{"udp", "127.0.0.1:http", "want a number"},
		{"udp", "127.0.0.1", "missing port"},
		// The one path is loopback, which reaches no other peer.
		{"udp4", ":0", "loopback cannot reach the destination"},
	} {
		_, err := d.ListenPacket(context.Background(), tc.network, tc.address)
		var oe *net.OpError
		if assert.Error(t, err, tc.address) {
			assert.Contains(t, err.Error(), tc.want, tc.address)
			assert.ErrorAs(t, err, &oe, "errors are *net.OpError")
		}
	}
}

// The address bound on a path: the one asked for if the path has it, else
// the path's of the family asked for, IPv4 first.
func TestListenAddrOn(t *testing.T) {
	both := &Path{Name: "both", Addrs: []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("10.0.0.1")}}
	v6 := &Path{Name: "v6", Addrs: []netip.Addr{netip.MustParseAddr("2001:db8::1")}}
	for _, tc := range []struct {
		network string
		ip      string
		p       *Path
		want    string // or the error's text
	}{
		{"udp", "", both, "10.0.0.1"},
		{"udp4", "", both, "10.0.0.1"},
		{"udp6", "", both, "2001:db8::1"},
		{"udp", "::", both, "2001:db8::1"},
		{"udp", "0.0.0.0", both, "10.0.0.1"},
		{"udp", "10.0.0.1", both, "10.0.0.1"},
		{"udp", "", v6, "2001:db8::1"},
		{"udp4", "10.0.0.2", both, "10.0.0.2 is not an address of path both"},
		{"udp6", "10.0.0.1", both, "10.0.0.1 is not an address of network udp6"},
		{"udp4", "", v6, "path v6 has no address for udp4"},
	} {
		var ip netip.Addr
		if tc.ip != "" {
			ip = netip.MustParseAddr(tc.ip)
		}
		got, err := listenAddrOn(tc.network, ip, tc.p)
		if err != nil {
			assert.Contains(t, err.Error(), tc.want, "%s %q on %s", tc.network, tc.ip, tc.p.Name)
			continue
		}
		assert.Equal(t, tc.want, got.String(), "%s %q on %s", tc.network, tc.ip, tc.p.Name)
	}
}

// Without a Manager and with intents that leave the path to the system,
// ListenPacket is net.ListenConfig's: the same type, the same behaviour.
func TestListenPacketDropIn(t *testing.T) {
	srv := udpEcho(t)
	var zero Dialer
	ours, err := zero.ListenPacket(context.Background(), "udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ours.Close()
	var lc net.ListenConfig
	theirs, err := lc.ListenPacket(context.Background(), "udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer theirs.Close()
	assert.IsType(t, theirs, ours)
	assert.Equal(t, ours.LocalAddr().String(), roundTrip(t, ours, srv))
	assert.Equal(t, theirs.LocalAddr().String(), roundTrip(t, theirs, srv))
}
