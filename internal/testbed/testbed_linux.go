package testbed

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// PathSpec describes one path between the client and the server namespace.
type PathSpec struct {
	Up   LinkParams // client to server
	Down LinkParams // server to client
	// Veth makes the path a plain veth pair: no delay, no rate limit.
	Veth bool
}

// Symmetric is a path with the given round-trip time (half each way) and
// rate in both directions.
func Symmetric(rtt time.Duration, rate int64) PathSpec {
	l := LinkParams{Delay: rtt / 2, Rate: rate}
	return PathSpec{Up: l, Down: l}
}

// RTT is the path's base round-trip time.
func (s PathSpec) RTT() time.Duration { return s.Up.Delay + s.Down.Delay }

// MPTCPSpec sets up Multipath TCP in the client namespace.
type MPTCPSpec struct {
	// Subflows and AddAddrAccepted are the path manager limits (both
	// namespaces); 0 means one per extra path.
	Subflows, AddAddrAccepted int
	// Endpoints adds a client "subflow" endpoint for every path but the
	// first, so connections grow a subflow on each (the first subflow
	// follows the socket's binding).
	Endpoints bool
}

// Spec describes a testbed. The zero Spec is two emulated paths, the
// symmetric preset of the Socket Intents evaluation (50 ms / 6 Mbit/s and
// 50 ms / 5 Mbit/s), and one server host.
type Spec struct {
	Paths []PathSpec
	// Servers is the number of server host addresses (web servers, CDNs),
	// 10.71.100.1 and up; default 1.
	Servers int
	// PolicyRouting adds per-source routing tables in the client namespace,
	// so a socket bound only to a path's source address leaves on that path.
	PolicyRouting bool
	// MPTCP, if set, configures MPTCP limits and endpoints.
	MPTCP *MPTCPSpec
	// TFO enables TCP Fast Open (net.ipv4.tcp_fastopen=3) in both namespaces.
	TFO bool
}

// Path is one path of a running testbed. Path i (from 1) has the client
// device "pi" with 10.71.i.1/24 and the server device "pis" with 10.71.i.2/24.
type Path struct {
	Index                  int
	ClientDev, ServerDev   string
	ClientAddr, ServerAddr netip.Addr
	// Up (client to server) and Down (server to client) emulate the link;
	// nil for a veth path.
	Up, Down *Direction
	Spec     PathSpec
}

// SetDown takes the emulated link down (every packet is lost) or up again,
// in both directions; a trace goes on meanwhile. The interfaces stay up,
// as with a radio link that lost its signal; for a link event, set the
// device down with ip.
func (p *Path) SetDown(down bool) {
	for _, d := range []*Direction{p.Up, p.Down} {
		if d != nil {
			d.change(func(l *LinkParams) { l.Down = down })
		}
	}
}

// Testbed is a running emulated network: a client namespace with several
// paths to a server namespace.
type Testbed struct {
	Client, Server *Netns
	Paths          []*Path
	// Hosts are the server host addresses, on the server's loopback; the
	// client routes them over path 1 by default (lower metric), over path i
	// when bound to it.
	Hosts []netip.Addr

	files         []*os.File
	closers       []func() error
	policyRouting bool
	procs         int // added to GOMAXPROCS for this testbed's deliverers
}

// extraProcs is what running testbeds add to GOMAXPROCS, and base what it
// was before the first. Each emulated direction's deliverer sleeps in
// clock_nanosleep on a locked thread and holds its P while it sleeps, so
// at GOMAXPROCS = cores (2 here) two sleeping deliverers left none for the
// emulator's readers, the servers and the client in this process: their
// wake-ups waited until sysmon retook a P, up to 10 ms, and the client
// read a 20 Mbit/s path's first flight as one burst, 5 ms late (README,
// "GOMAXPROCS"). One P more per deliverer leaves the rest of the process
// as many as it had.
var extraProcs struct {
	sync.Mutex
	base, n int
}

// addProcs adds n (negative: removes) to GOMAXPROCS above its base.
func addProcs(n int) {
	extraProcs.Lock()
	defer extraProcs.Unlock()
	if extraProcs.n == 0 {
		extraProcs.base = runtime.GOMAXPROCS(0)
	}
	extraProcs.n += n
	runtime.GOMAXPROCS(extraProcs.base + extraProcs.n)
}

// routeHosts routes the server hosts over p in the client namespace, with
// metric 100·i (path 1 preferred), and in p's own table with policy routing.
func (tb *Testbed) routeHosts(p *Path, policyRouting bool) error {
	via := []string{"dev", p.ClientDev}
	if p.Spec.Veth { // an Ethernet link needs a next hop to ARP for
		via = append([]string{"via", p.ServerAddr.String()}, via...)
	}
	args := append(append([]string{"route", "replace", "10.71.100.0/24"}, via...), "metric", strconv.Itoa(100*p.Index))
	if err := tb.Client.IP(args...); err != nil {
		return err
	}
	if policyRouting {
		args := append(append([]string{"route", "replace", "10.71.100.0/24"}, via...), "table", strconv.Itoa(100+p.Index))
		return tb.Client.IP(args...)
	}
	return nil
}

// SetLinkUp sets p's client device up or down, as a link event the
// client sees (a device going down also loses its routes, which up
// restores).
func (tb *Testbed) SetLinkUp(p *Path, up bool) error {
	if !up {
		return tb.Client.IP("link", "set", p.ClientDev, "down")
	}
	if err := tb.Client.IP("link", "set", p.ClientDev, "up"); err != nil {
		return err
	}
	return tb.routeHosts(p, tb.policyRouting)
}

// New starts a testbed for t and stops it when t ends; it skips t without
// root.
func New(t testing.TB, spec Spec) *Testbed {
	t.Helper()
	RequireRoot(t)
	tb, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Errorf("stopping testbed: %v", err)
		}
	})
	return tb
}

// Start builds the namespaces, links and routes of spec and starts the
// link emulators. Close undoes it all.
func Start(spec Spec) (_ *Testbed, err error) {
	if len(spec.Paths) == 0 {
		spec.Paths = []PathSpec{Symmetric(50*time.Millisecond, 6e6), Symmetric(50*time.Millisecond, 5e6)}
	}
	if len(spec.Paths) > 99 {
		return nil, errors.New("testbed: at most 99 paths")
	}
	if spec.Servers <= 0 {
		spec.Servers = 1
	}
	tb := &Testbed{}
	defer func() {
		if err != nil {
			tb.Close()
		}
	}()
	if tb.Client, err = CreateNetns("cli"); err != nil {
		return nil, err
	}
	tb.closers = append(tb.closers, tb.Client.Close)
	if tb.Server, err = CreateNetns("srv"); err != nil {
		return nil, err
	}
	tb.closers = append(tb.closers, tb.Server.Close)

	for k := 1; k <= spec.Servers; k++ {
		a := netip.AddrFrom4([4]byte{10, 71, 100, byte(k)})
		tb.Hosts = append(tb.Hosts, a)
		if err := tb.Server.IP("addr", "add", a.String()+"/32", "dev", "lo"); err != nil {
			return nil, err
		}
	}
	for i, ps := range spec.Paths {
		p, err := tb.addPath(i+1, ps)
		if err != nil {
			return nil, err
		}
		tb.Paths = append(tb.Paths, p)
		if spec.PolicyRouting {
			if err := tb.Client.IP("rule", "add", "from", p.ClientAddr.String(), "table", strconv.Itoa(100+p.Index)); err != nil {
				return nil, err
			}
		}
		if err := tb.routeHosts(p, spec.PolicyRouting); err != nil {
			return nil, err
		}
	}
	tb.policyRouting = spec.PolicyRouting
	if spec.MPTCP != nil {
		if err := tb.setupMPTCP(spec.MPTCP); err != nil {
			return nil, err
		}
	}
	if spec.TFO {
		for _, n := range []*Netns{tb.Client, tb.Server} {
			if err := n.Sysctl("net/ipv4/tcp_fastopen", "3"); err != nil {
				return nil, err
			}
		}
	}
	return tb, nil
}

func (tb *Testbed) addPath(i int, ps PathSpec) (*Path, error) {
	p := &Path{Index: i, Spec: ps,
		ClientDev: fmt.Sprintf("p%d", i), ServerDev: fmt.Sprintf("p%ds", i),
		ClientAddr: netip.AddrFrom4([4]byte{10, 71, byte(i), 1}),
		ServerAddr: netip.AddrFrom4([4]byte{10, 71, byte(i), 2}),
	}
	if ps.Veth {
		if err := run("ip", "link", "add", p.ClientDev, "netns", tb.Client.Name, "type", "veth",
			"peer", "name", p.ServerDev, "netns", tb.Server.Name); err != nil {
			return nil, err
		}
	} else {
		cf, err := openTUN(tb.Client, p.ClientDev)
		if err != nil {
			return nil, err
		}
		tb.files = append(tb.files, cf)
		sf, err := openTUN(tb.Server, p.ServerDev)
		if err != nil {
			return nil, err
		}
		tb.files = append(tb.files, sf)
		// One BDP of the path at each direction's rate.
		rtt := ps.RTT()
		p.Up = &Direction{in: cf, out: sf, bdp: int(float64(ps.Up.MeanRate()) * rtt.Seconds() / 8)}
		p.Down = &Direction{in: sf, out: cf, bdp: int(float64(ps.Down.MeanRate()) * rtt.Seconds() / 8)}
		p.Up.Set(ps.Up)
		p.Down.Set(ps.Down)
		p.Up.start(uint64(2 * i))
		p.Down.start(uint64(2*i + 1))
		addProcs(2)
		tb.procs += 2
	}
	for _, side := range []struct {
		n    *Netns
		dev  string
		addr netip.Addr
	}{{tb.Client, p.ClientDev, p.ClientAddr}, {tb.Server, p.ServerDev, p.ServerAddr}} {
		if err := side.n.IP("addr", "add", side.addr.String()+"/24", "dev", side.dev); err != nil {
			return nil, err
		}
		if err := side.n.IP("link", "set", side.dev, "up"); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (tb *Testbed) setupMPTCP(m *MPTCPSpec) error {
	extra := len(tb.Paths) - 1
	subflows, accepted := m.Subflows, m.AddAddrAccepted
	if subflows == 0 {
		subflows = extra
	}
	if accepted == 0 {
		accepted = extra
	}
	for _, n := range []*Netns{tb.Client, tb.Server} {
		if err := n.IP("mptcp", "limits", "set", "subflow", strconv.Itoa(subflows), "add_addr_accepted", strconv.Itoa(accepted)); err != nil {
			return err
		}
	}
	if m.Endpoints {
		for _, p := range tb.Paths[1:] {
			if err := tb.Client.IP("mptcp", "endpoint", "add", p.ClientAddr.String(), "dev", p.ClientDev, "subflow"); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close stops the emulators, deletes the namespaces (and with them every
// interface) and stops what was registered with OnClose, last first.
func (tb *Testbed) Close() error {
	var errs []error
	for _, f := range tb.files {
		errs = append(errs, f.Close())
	}
	for _, p := range tb.Paths {
		for _, d := range []*Direction{p.Up, p.Down} {
			if d != nil {
				d.wg.Wait()
			}
		}
	}
	tb.files = nil
	if tb.procs > 0 {
		addProcs(-tb.procs)
		tb.procs = 0
	}
	for i := len(tb.closers) - 1; i >= 0; i-- {
		errs = append(errs, tb.closers[i]())
	}
	tb.closers = nil
	return errors.Join(errs...)
}

// TakeLateness returns the lateness of every emulated direction since the
// last call (see Direction.TakeLateness), merged, and starts a new span.
func (tb *Testbed) TakeLateness() Lateness {
	var l Lateness
	for _, p := range tb.Paths {
		for _, d := range []*Direction{p.Up, p.Down} {
			if d != nil {
				l = l.Add(d.TakeLateness())
			}
		}
	}
	return l
}

// OnClose registers f to run when the testbed closes, before the namespaces
// are deleted.
func (tb *Testbed) OnClose(f func() error) { tb.closers = append(tb.closers, f) }
