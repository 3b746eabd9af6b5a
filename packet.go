package intents

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// PacketConn is a UDP socket on a chosen path, as Dialer.ListenPacket
// returns it: QUIC, DNS, RTP or a game's datagrams sent through it leave
// by that path's interface, from its address. It is a *net.UDPConn, with
// all its methods (quic-go looks for ReadMsgUDP, SetReadBuffer and
// SyscallConn to use ECN, GSO and larger buffers).
type PacketConn struct {
	*net.UDPConn
	path    *Path
	binding Binding
}

// Path is the path the socket is bound to.
func (c *PacketConn) Path() *Path { return c.path }

// Binding says how: to the interface, or (where the OS has no interface
// binding, or it is not permitted) to the path's address only.
func (c *PacketConn) Binding() Binding { return c.binding }

// ListenPacket opens a packet socket on the local address on the path
// chosen for the intents in ctx: a UDP socket bound to the path's
// interface and address, so that a protocol over UDP follows the intents
// as a dial does, prohibitions included. A UDP socket has no destination
// yet, so the policy decides from the intents and the paths alone (a
// loopback address in address makes it a socket for loopback peers, which
// the system routes).
//
// address is as for net.ListenPacket: its port (0: any), and an IP that,
// if it is not unspecified, must be one of the chosen path's addresses
// (a path that does not have it is passed over). network is "udp",
// "udp4" or "udp6"; for "udp" with no IP the path's first address is
// used, preferring IPv4. On a decision for system routing, or without a
// Manager and with intents that do not constrain paths, it is
// net.ListenConfig.ListenPacket (a *net.UDPConn); on a chosen path it is a
// *PacketConn. Other networks are not path-selected. Errors are
// *net.OpError; when no path is permitted, its Err is a *NoPathError.
func (d *Dialer) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	in, _ := FromContext(ctx)
	// The system's socket, for other networks and system routing: the
	// caller's Control and the intents' DSCP, as a dial has them.
	lc := listenConfig(ctx, chainControl(func(ctx context.Context, nw, _ string, c syscall.RawConn) error {
		d.markDSCP(ctx, nw, c)
		return nil
	}, d.Control, d.ControlContext))
	switch network {
	case "udp", "udp4", "udp6":
	default:
		return lc.ListenPacket(ctx, network, address)
	}
	m := d.Manager
	if m == nil {
		if !in.constrainsPaths() {
			return lc.ListenPacket(ctx, network, address)
		}
		var err error
		if m, err = DefaultManager(); err != nil {
			return nil, &net.OpError{Op: "listen", Net: network, Err: err}
		}
	}
	ip, port, err := splitListenAddr(address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	// No destination yet: the policy decides for any peer, except that a
	// socket on a loopback address talks to loopback peers.
	var dest string
	if ip.IsLoopback() {
		dest = ip.String()
	}
	pl, err := m.plan(ctx, network, dest, 0, false)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	var errs []*PathError
	for _, c := range pl.choices {
		var pc net.PacketConn
		if c.Path == nil {
			pc, err = lc.ListenPacket(ctx, network, address)
		} else {
			pc, err = d.listenPath(ctx, network, ip, port, c.Path)
		}
		if err == nil {
			return pc, nil
		}
		errs = append(errs, &PathError{Path: pathName(c.Path), Err: err})
		if ctx.Err() != nil {
			break
		}
	}
	return nil, pathsError("listen", network, errs)
}

// listenConfig is a net.ListenConfig whose sockets get cc with ctx
// (ListenConfig has no ControlContext).
func listenConfig(ctx context.Context, cc controlFunc) net.ListenConfig {
	return net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		return cc(ctx, network, address, c)
	}}
}

// splitListenAddr parses a local address: an IP literal or nothing, and a
// port number.
func splitListenAddr(address string) (netip.Addr, uint16, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("intents: port %q: want a number", portStr)
	}
	var ip netip.Addr
	if host != "" {
		if ip, err = netip.ParseAddr(host); err != nil {
			return netip.Addr{}, 0, fmt.Errorf("intents: local address %q: want an IP address", host)
		}
	}
	return ip.Unmap(), uint16(port), nil
}

// listenPath opens a UDP socket on p: ip if it is p's, else p's address of
// the network's family.
func (d *Dialer) listenPath(ctx context.Context, network string, ip netip.Addr, port uint16, p *Path) (*PacketConn, error) {
	local, err := listenAddrOn(network, ip, p)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	binding := BindInterface
	lc := listenConfig(ctx, d.pathControl(p, &binding, nil))
	nw := "udp4"
	if local.Is6() {
		nw = "udp6"
	}
	pc, err := lc.ListenPacket(ctx, nw, netip.AddrPortFrom(local, port).String())
	if err != nil {
		return nil, err
	}
	return &PacketConn{UDPConn: pc.(*net.UDPConn), path: p, binding: binding}, nil
}

// listenAddrOn is the address to bind on p for a socket on network asking
// for ip (unspecified or invalid: any of p's of the family, IPv4 first).
func listenAddrOn(network string, ip netip.Addr, p *Path) (netip.Addr, error) {
	family := networkFamily(network)
	if ip.IsValid() {
		if ip.Is4() && family == 6 || ip.Is6() && family == 4 {
			return netip.Addr{}, fmt.Errorf("intents: %s is not an address of network %s", ip, network)
		}
		if !ip.IsUnspecified() {
			for _, a := range p.Addrs {
				if a == ip {
					return a, nil
				}
			}
			return netip.Addr{}, fmt.Errorf("intents: %s is not an address of path %s", ip, p.Name)
		}
		family = 4
		if ip.Is6() {
			family = 6
		}
	}
	var v6 netip.Addr
	for _, a := range p.Addrs {
		switch {
		case a.Is4() && family != 6:
			return a, nil
		case a.Is6() && family != 4 && !v6.IsValid():
			v6 = a
		}
	}
	if v6.IsValid() {
		return v6, nil
	}
	return netip.Addr{}, fmt.Errorf("intents: path %s has no address for %s (%s)", p.Name, network, familiesOf(p))
}
