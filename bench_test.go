package intents

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/sockintents/intents/internal/sockopt"
)

// BenchmarkDialOverhead dials a loopback listener with net.Dialer and with
// intents' Dialer in turn, in the same loop, and reports each one's time
// per dial and the ratio to net.Dialer, so machine noise hits both alike.
//
//	zero:  the zero Dialer (drop-in: no manager, no intents)
//	plan:  a Manager, intents in ctx, loopback destination (planning cost)
//	bound: a connection bound to the loopback path (source + interface)
//	bound-floor: net.Dialer itself with the same binding (a source address,
//	  SO_BINDTODEVICE and IP_BIND_ADDRESS_NO_PORT, set by a Control
//	  function): what binding costs the kernel, whoever asks for it;
//	  bound's ratio over this one's is this package's own share.
func BenchmarkDialOverhead(b *testing.B) {
	l := listen(b, "tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: "lo"}}, NoWatch: true})
	if err != nil {
		b.Skip(err)
	}
	ifi, err := net.InterfaceByName("lo")
	if err != nil {
		b.Skip(err)
	}
	lo := &Path{Name: "lo", Index: ifi.Index, Type: TypeLoopback, Up: true, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	ctx := WithIntents(context.Background(), Intents{Category: CategoryQuery, Types: map[InterfaceType]Level{TypeWifi: LevelPrefer}})
	plain := WithIntents(context.Background(), Intents{Category: CategoryQuery}) // no path preferences
	var nd net.Dialer
	var zero Dialer
	managed := Dialer{Manager: m}
	floor := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)},
		Control: func(network, _ string, c syscall.RawConn) error {
			if err := sockopt.BindToInterface(c, ifi.Index, "lo", false); err != nil {
				return err
			}
			return sockopt.BindAddressNoPort(c)
		}}
	for _, bc := range []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"zero", func() (net.Conn, error) { return zero.DialContext(plain, "tcp", addr) }},
		{"plan", func() (net.Conn, error) { return managed.DialContext(ctx, "tcp", addr) }},
		{"bound", func() (net.Conn, error) { return managed.dialPath(ctx, m, "tcp", "127.0.0.1", port, lo, 0) }},
		{"bound-floor", func() (net.Conn, error) { return floor.DialContext(ctx, "tcp", addr) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var base, ours time.Duration
			for b.Loop() {
				t0 := time.Now()
				c, err := nd.DialContext(ctx, "tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
				t1 := time.Now()
				c, err = bc.dial()
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
				base += t1.Sub(t0)
				ours += time.Since(t1)
			}
			b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "net-ns/dial")
			b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "intents-ns/dial")
			b.ReportMetric(float64(ours)/float64(base), "ratio")
		})
	}
}

// BenchmarkPlan is one decision: intents applied to the path table, then
// the policy (here a trivial one; built-in policies have their own
// benchmarks in package policy).
func BenchmarkPlan(b *testing.B) {
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: "lo"}}, NoWatch: true,
		Policy: PolicyFunc(func(req *Request, d *Decision) {
			for _, p := range req.Paths {
				d.Choices = append(d.Choices, Choice{Path: p})
			}
		})})
	if err != nil {
		b.Skip(err)
	}
	paths := testPaths()
	m.paths.Store(&paths)
	ctx := WithIntents(context.Background(), Intents{Types: map[InterfaceType]Level{TypeWifi: LevelPrefer, TypeCellular: LevelAvoid}})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.plan(ctx, "tcp", "192.0.2.1", 443, true); err != nil {
			b.Fatal(err)
		}
	}
}
