package intents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/hostport"
	"github.com/sockintents/intents/internal/sockopt"
	"github.com/sockintents/intents/mptcp"
)

// Dialer connects like net.Dialer, on the path that the intents in the
// context and the Manager's policy choose. The zero Dialer is exactly a zero
// net.Dialer: without a Manager and without path preferences in the
// context, it leaves everything to the operating system.
//
// For each dial: intents from ctx → permitted paths (preferences applied) →
// policy → name resolution on the chosen path (its own DNS servers, queried
// through it) → connect bound to that path (interface and source address),
// with Happy Eyeballs across the path's addresses. If a path fails, the next
// choice of the policy is tried; a prohibited path never is.
type Dialer struct {
	// Manager supplies paths and policy. nil: DefaultManager, used only
	// when the intents constrain paths.
	Manager *Manager

	// Timeout, Deadline, KeepAlive, KeepAliveConfig, FallbackDelay, Control
	// and ControlContext mean what they mean in net.Dialer. Control and
	// ControlContext run after this package has bound the socket.
	Timeout         time.Duration
	Deadline        time.Time
	KeepAlive       time.Duration
	KeepAliveConfig net.KeepAliveConfig
	FallbackDelay   time.Duration
	Control         func(network, address string, c syscall.RawConn) error
	ControlContext  func(ctx context.Context, network, address string, c syscall.RawConn) error

	// LocalAddr is the local address to dial from where the operating
	// system routes (no Manager, or a decision for system routing), as in
	// net.Dialer. On a chosen path the path's address is the source.
	LocalAddr net.Addr

	// MarkDSCP marks each connection's packets with the DSCP its intents
	// map to (Intents.DSCP), e.g. background transfers as Lower Effort.
	// Off by default: networks may bleach or police marks. Unix only.
	MarkDSCP bool

	// RacePaths races the policy's paths on connect, as Happy Eyeballs
	// races addresses (RFC 8305) but across paths: when the first path has
	// not connected within PathRaceDelay, the next one is dialed beside
	// it, and so on; the first connection made is returned and the others
	// closed. A path still connecting when another won gets the time it
	// had taken as an RTT sample and a lost packet in its estimates, so the
	// next decision knows. Without it (the default) a dial tries one path
	// after the other, each until it fails, so a path that silently drops
	// everything holds the dial until its timeout. A path the intents
	// avoid, or an expensive one, joins a race only for intents whose
	// Resilience is ResilienceSensitive; a prohibited one never does. TCP
	// only.
	RacePaths bool
	// PathRaceDelay is the race's delay (0: three of the path's measured
	// round trips, at least 100 ms and at most 250 ms, which
	// it is for a path whose RTT is not known yet).
	PathRaceDelay time.Duration

	// FastOpen asks for TCP Fast Open (TCP_FASTOPEN_CONNECT on Linux): from
	// the second connection to a server on, the first write rides in the
	// SYN, saving a round trip. Never used together with MPTCP (the kernel
	// stalls then), and a no-op outside Linux. Conn.FastOpened tells
	// whether it happened. The server must allow it
	// (net.ipv4.tcp_fastopen).
	FastOpen bool

	mptcp int8 // SetMultipathTCP: 0 not set, 1 on, -1 off
}

// SetMultipathTCP directs the Dialer to use, or not use, Multipath TCP
// when the intents do not say (Intents.Multipath unspecified), as
// net.Dialer.SetMultipathTCP does: on means MultipathHandover, with the
// first subflow on the chosen path.
func (d *Dialer) SetMultipathTCP(use bool) {
	d.mptcp = -1
	if use {
		d.mptcp = 1
	}
}

// MultipathTCP reports whether SetMultipathTCP turned Multipath TCP on.
func (d *Dialer) MultipathTCP() bool { return d.mptcp > 0 }

// withMPTCPDefault adds SetMultipathTCP's choice to ctx's intents when
// they do not say.
func (d *Dialer) withMPTCPDefault(ctx context.Context) context.Context {
	if d.mptcp == 0 {
		return ctx
	}
	if in, _ := FromContext(ctx); in.Multipath != MultipathUnspecified {
		return ctx
	}
	mp := MultipathOff
	if d.mptcp > 0 {
		mp = MultipathHandover
	}
	return WithIntents(ctx, Intents{Multipath: mp})
}

// DialTCP dials like DialContext for a TCP network and returns the
// *net.TCPConn, as net.Dialer.DialTCP does. A valid laddr binds that local
// address and leaves the route to the operating system.
func (d *Dialer) DialTCP(ctx context.Context, network string, laddr, raddr netip.AddrPort) (*net.TCPConn, error) {
	if laddr.IsValid() {
		return d.netDialer(MultipathUnspecified).DialTCP(ctx, network, laddr, raddr)
	}
	c, err := d.DialContext(ctx, network, raddr.String())
	if err != nil {
		return nil, err
	}
	return osConn[net.TCPConn](c, network)
}

// DialUDP dials like DialContext for a UDP network and returns the
// *net.UDPConn, as net.Dialer.DialUDP does. A valid laddr binds that local
// address and leaves the route to the operating system.
func (d *Dialer) DialUDP(ctx context.Context, network string, laddr, raddr netip.AddrPort) (*net.UDPConn, error) {
	if laddr.IsValid() {
		return d.netDialer(MultipathUnspecified).DialUDP(ctx, network, laddr, raddr)
	}
	c, err := d.DialContext(ctx, network, raddr.String())
	if err != nil {
		return nil, err
	}
	return osConn[net.UDPConn](c, network)
}

// DialIP dials raw IP as net.Dialer.DialIP does: not path-selected.
func (d *Dialer) DialIP(ctx context.Context, network string, laddr, raddr netip.Addr) (*net.IPConn, error) {
	return d.netDialer(MultipathUnspecified).DialIP(ctx, network, laddr, raddr)
}

// DialUnix dials a Unix socket as net.Dialer.DialUnix does.
func (d *Dialer) DialUnix(ctx context.Context, network string, laddr, raddr *net.UnixAddr) (*net.UnixConn, error) {
	return d.netDialer(MultipathUnspecified).DialUnix(ctx, network, laddr, raddr)
}

// osConn returns the operating system's connection under c as a T. A
// *Conn's Close would end the Manager's MPTCP accounting of it: for the
// connection returned that happens when it is garbage collected.
func osConn[T any, P interface {
	*T
	net.Conn
}](c net.Conn, network string) (P, error) {
	var release func()
	if ic, ok := c.(*Conn); ok {
		c, release = ic.Conn, ic.release
	}
	t, ok := c.(P)
	if !ok {
		c.Close()
		if release != nil {
			release()
		}
		return nil, &net.OpError{Op: "dial", Net: network, Source: c.LocalAddr(), Addr: c.RemoteAddr(),
			Err: fmt.Errorf("intents: dialed a %T", c)}
	}
	if release != nil {
		runtime.AddCleanup((*T)(t), func(release func()) { release() }, release)
	}
	return t, nil
}

// Binding says how a connection was steered onto its path.
type Binding uint8

// Bindings.
const (
	BindNone      Binding = iota // operating system routing
	BindSource                   // source address only (no privilege or no OS support)
	BindInterface                // interface (SO_BINDTODEVICE, IP_BOUND_IF, IP_UNICAST_IF) and source address
)

// String returns "none", "source" or "interface".
func (b Binding) String() string {
	return [...]string{"none", "source", "interface"}[b]
}

// Conn is a connection made by Dialer on a chosen path. It passes
// ReadFrom, WriteTo, CloseRead, CloseWrite and SyscallConn to the underlying
// connection, so copying through it keeps the kernel's fast paths.
type Conn struct {
	net.Conn
	path    *Path
	binding Binding
	release func() // once, at Close: the Manager's MPTCP accounting
	closed  sync.Once
}

// Close closes the connection.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	if c.release != nil {
		c.closed.Do(c.release)
	}
	return err
}

// Path returns the path the connection uses.
func (c *Conn) Path() *Path { return c.path }

// Binding returns how the connection was bound to its path.
func (c *Conn) Binding() Binding { return c.binding }

// MPTCP reports the connection's Multipath TCP state: its subflows and
// their addresses. It fails with mptcp.ErrFallback when the connection
// asked for MPTCP but runs plain TCP, and with another error when it never
// asked (or outside Linux).
func (c *Conn) MPTCP() (mptcp.Info, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return mptcp.Info{}, errors.ErrUnsupported
	}
	return mptcp.ConnInfo(sc)
}

// FastOpened reports whether data went in the connection's SYN (TCP Fast
// Open, see Dialer.FastOpen). Ask after the first write has been answered.
func (c *Conn) FastOpened() (bool, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false, errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, err
	}
	return sockopt.SentSYNData(rc)
}

// NetConn returns the underlying *net.TCPConn or *net.UDPConn.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// ReadFrom lets io.Copy use the underlying connection's splice/sendfile.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// WriteTo lets io.Copy use the underlying connection's splice.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.Conn.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, struct{ io.Reader }{c.Conn})
}

// CloseWrite shuts down the writing side, where the connection has one.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// CloseRead shuts down the reading side, where the connection has one.
func (c *Conn) CloseRead() error {
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return errors.ErrUnsupported
}

// SyscallConn returns the underlying raw connection.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// PathOf returns the path c was dialed on, and how it was bound, looking
// through wrappers that have a NetConn method (such as *tls.Conn). For a
// connection the operating system routed it returns nil (which prints as
// "system") and BindNone.
func PathOf(c net.Conn) (*Path, Binding) {
	for range 8 { // wrappers are shallow; a cycle must not hang
		switch v := c.(type) {
		case *Conn:
			return v.path, v.binding
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil, BindNone
		}
	}
	return nil, BindNone
}

// Dial connects to address on the named network; see DialContext.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address on the named network, on the path chosen
// for the intents in ctx. Connections on a chosen path are *Conn; those the
// operating system routed are what net.Dialer returns. Errors are
// *net.OpError; when no path is permitted, its Err is a *NoPathError.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ctx = d.withMPTCPDefault(ctx)
	in, _ := FromContext(ctx)
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default: // unix sockets and raw IP are not path-selected
		return d.netDialer(in.Multipath).DialContext(ctx, network, address)
	}
	m := d.Manager
	if m == nil {
		if !in.constrainsPaths() {
			return d.netDialer(in.Multipath).DialContext(ctx, network, address)
		}
		var err error
		if m, err = DefaultManager(); err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
	}
	host, port, err := splitHostPort(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	ctx, cancel := d.withDeadline(ctx)
	defer cancel()

	pl, err := m.plan(ctx, network, host, port, false)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if d.RacePaths && len(pl.choices) > 1 && networkIsTCP(network) {
		conn, errs := d.racePaths(ctx, &in, pl, func(ctx context.Context, c Choice) (net.Conn, error) {
			if c.Path == nil {
				return d.netDialer(pl.multipath(c)).DialContext(ctx, network, m.osAddress(host, port, address))
			}
			return d.dialPath(ctx, m, network, host, port, c.Path, pl.multipath(c))
		})
		if conn != nil {
			return conn, nil
		}
		return nil, pathsError("dial", network, errs)
	}
	var errs []*PathError
	for _, c := range pl.choices {
		var conn net.Conn
		var err error
		if c.Path == nil {
			conn, err = d.netDialer(pl.multipath(c)).DialContext(ctx, network, m.osAddress(host, port, address))
		} else {
			conn, err = d.dialPath(ctx, m, network, host, port, c.Path, pl.multipath(c))
		}
		if err == nil {
			return conn, nil
		}
		errs = append(errs, &PathError{Path: pathName(c.Path), Err: err})
		if ctx.Err() != nil {
			break
		}
	}
	return nil, pathsError("dial", network, errs)
}

// pathsError is the error of a dial (or listen: op) whose every path
// failed: the one path's error, or every path's, tagged with its path and
// joined (as sing-box's dialParallelInterface keeps them), as a
// *net.OpError. Its Source and Addr are the first failed connection's, as
// net's dialSerial reports the first address's error.
func pathsError(op, network string, errs []*PathError) error {
	err := pathErrors(errs)
	var oe *net.OpError
	if len(errs) == 1 && errors.As(err, &oe) {
		return err
	}
	out := &net.OpError{Op: op, Net: network, Err: err}
	for _, pe := range errs {
		if errors.As(pe.Err, &oe) && oe.Addr != nil {
			out.Source, out.Addr = oe.Source, oe.Addr
			break
		}
	}
	return out
}

func networkIsTCP(network string) bool {
	return network == "tcp" || network == "tcp4" || network == "tcp6"
}

// splitHostPort splits a dial's address, whose port is required.
func splitHostPort(ctx context.Context, network, address string) (string, uint16, error) {
	return hostport.Split(ctx, network, address, 0)
}

// withDeadline applies Timeout and Deadline as net.Dialer does.
func (d *Dialer) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline := d.Deadline
	if d.Timeout != 0 {
		if t := time.Now().Add(d.Timeout); deadline.IsZero() || t.Before(deadline) {
			deadline = t
		}
	}
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// netDialer is the net.Dialer equivalent of d, without binding.
func (d *Dialer) netDialer(mp Multipath) *net.Dialer {
	nd := &net.Dialer{
		Timeout: d.Timeout, Deadline: d.Deadline, LocalAddr: d.LocalAddr,
		KeepAlive: d.KeepAlive, KeepAliveConfig: d.KeepAliveConfig,
		FallbackDelay: d.FallbackDelay,
		Control:       d.Control, ControlContext: d.ControlContext,
	}
	multipath := mp == MultipathHandover || mp == MultipathAggregate
	if multipath {
		nd.SetMultipathTCP(true)
	}
	if (d.FastOpen && !multipath) || d.MarkDSCP {
		nd.ControlContext = chainControl(func(ctx context.Context, network, _ string, c syscall.RawConn) error {
			if d.FastOpen && !multipath && strings.HasPrefix(network, "tcp") {
				_ = sockopt.FastOpenConnect(c) // without it, an ordinary connection
			}
			d.markDSCP(ctx, network, c)
			return nil
		}, d.Control, d.ControlContext)
		nd.Control = nil
	}
	return nd
}

// controlFunc is net.Dialer.ControlContext's type.
type controlFunc = func(ctx context.Context, network, address string, c syscall.RawConn) error

// chainControl returns a ControlContext that runs ours, then the
// caller's own ControlContext or, without one, Control: this package's
// socket options first, the caller's after, as one function wherever a
// socket is made.
func chainControl(ours controlFunc, control func(network, address string, c syscall.RawConn) error, controlCtx controlFunc) controlFunc {
	return func(ctx context.Context, network, address string, c syscall.RawConn) error {
		if err := ours(ctx, network, address, c); err != nil {
			return err
		}
		if controlCtx != nil {
			return controlCtx(ctx, network, address, c)
		}
		if control != nil {
			return control(network, address, c)
		}
		return nil
	}
}

// dialPath resolves host on path p and connects through p with Happy
// Eyeballs (RFC 8305) over the path's addresses.
func (d *Dialer) dialPath(ctx context.Context, m *Manager, network, host string, port uint16, p *Path, mp Multipath) (net.Conn, error) {
	addrs, viaLoopback, err := m.pathAddrs(ctx, network, host, p)
	if err != nil {
		return nil, err
	}
	if viaLoopback {
		return d.netDialer(mp).DialContext(ctx, network, net.JoinHostPort(addrs[0].String(), strconv.Itoa(int(port))))
	}
	var primaries, fallbacks []netip.Addr
	for _, a := range addrs {
		if a.Is4() == addrs[0].Is4() {
			primaries = append(primaries, a)
		} else {
			fallbacks = append(fallbacks, a)
		}
	}
	if d.FallbackDelay < 0 { // disabled, as in net.Dialer: one family after the other
		primaries, fallbacks = append(primaries, fallbacks...), nil
	}
	release := m.useMPTCP(p, mp)
	c, err := pathDial{Dialer: d, network: network, port: port, path: p, mp: mp}.parallel(ctx, primaries, fallbacks)
	if err != nil {
		release()
		return nil, err
	}
	if ic, ok := c.(*Conn); ok {
		ic.release = release
	}
	return c, nil
}

func familiesOf(p *Path) string {
	var f []string
	if hasFamily(p, 4) {
		f = append(f, "IPv4")
	}
	if hasFamily(p, 6) {
		f = append(f, "IPv6")
	}
	return strings.Join(f, ", ")
}

type dialResult struct {
	conn    net.Conn
	err     error
	primary bool
}

// pathDial is one dial through one path: what its three steps share, as
// Go's sysDialer carries it for net's dialParallel, dialSerial and
// dialSingle.
type pathDial struct {
	*Dialer
	network string
	port    uint16
	path    *Path
	mp      Multipath
}

// parallel races the primary family against the fallback family, which
// starts FallbackDelay (default 300ms) later or as soon as the primaries
// have all failed.
func (pd pathDial) parallel(ctx context.Context, primaries, fallbacks []netip.Addr) (net.Conn, error) {
	if len(fallbacks) == 0 {
		return pd.serial(ctx, primaries)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan dialResult) // unbuffered: each racer waits for the reader, or for cancel
	race := func(addrs []netip.Addr, primary bool) {
		c, err := pd.serial(ctx, addrs)
		select {
		case results <- dialResult{c, err, primary}:
		case <-ctx.Done():
			if c != nil {
				c.Close()
			}
		}
	}
	go race(primaries, true)
	delay := pd.FallbackDelay
	if delay == 0 {
		delay = 300 * time.Millisecond
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	started, pending := false, 1
	var primaryErr, fallbackErr error
	for {
		select {
		case <-timer.C:
			if !started {
				started, pending = true, pending+1
				go race(fallbacks, false)
			}
		case res := <-results:
			pending--
			if res.err == nil {
				return res.conn, nil
			}
			if res.primary {
				primaryErr = res.err
			} else {
				fallbackErr = res.err
			}
			if !started {
				started, pending = true, pending+1
				go race(fallbacks, false)
			} else if pending == 0 {
				if primaryErr != nil {
					return nil, primaryErr
				}
				return nil, fallbackErr
			}
		}
	}
}

// serial tries addrs in order, giving each a fair share of the time left.
func (pd pathDial) serial(ctx context.Context, addrs []netip.Addr) (net.Conn, error) {
	var firstErr error
	for i, a := range addrs {
		actx, cancel := partialDeadline(ctx, len(addrs)-i)
		c, err := pd.one(actx, netip.AddrPortFrom(a, pd.port))
		cancel()
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err // as net's dialSerial: the first address's error
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// partialDeadline shares the time left among the addresses left, at least
// 2s each, as net does.
func partialDeadline(ctx context.Context, left int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || left <= 1 {
		return ctx, func() {}
	}
	share := time.Until(deadline) / time.Duration(left)
	if share < 2*time.Second {
		share = 2 * time.Second
	}
	if t := time.Now().Add(share); t.Before(deadline) {
		return context.WithDeadline(ctx, t)
	}
	return ctx, func() {}
}

// one connects to one address through the path: bound to its interface
// where the OS allows it, always from its address of that family.
func (pd pathDial) one(ctx context.Context, remote netip.AddrPort) (net.Conn, error) {
	d, network, p, mp := pd.Dialer, pd.network, pd.path, pd.mp
	local, _ := p.Addr(remote.Addr())
	binding := BindInterface
	nd := d.netDialer(mp)
	nd.Timeout, nd.Deadline = 0, time.Time{} // already in ctx
	nd.LocalAddr = localAddr(network, local)
	fastOpen := d.FastOpen && strings.HasPrefix(network, "tcp") && !nd.MultipathTCP()
	nd.Control = nil
	nd.ControlContext = d.pathControl(p, &binding, func(nw string, c syscall.RawConn) {
		if strings.HasPrefix(nw, "tcp") {
			// An optimisation only: without it the port is chosen at bind().
			_ = sockopt.BindAddressNoPort(c)
		}
		if fastOpen {
			// Without it the connection is an ordinary one: not an error.
			_ = sockopt.FastOpenConnect(c)
		}
	})
	start := time.Now()
	c, err := nd.DialContext(ctx, network, remote.String())
	if err != nil {
		return nil, err
	}
	// With TFO, connect returns before the handshake. A handshake that took
	// the initial retransmission timeout had a SYN or SYN-ACK resent, and
	// its time is no round trip (Karn's rule, RFC 6298).
	if strings.HasPrefix(network, "tcp") && p.est != nil && !fastOpen {
		p.est.ClearUnresponsive() // a handshake got through
	}
	if rtt := time.Since(start); strings.HasPrefix(network, "tcp") && p.est != nil && !fastOpen && rtt < initialRTO {
		if ctx.Value(probeKey{}) != nil {
			p.est.AddProbe(rtt)
		} else {
			p.sampleRTT(rtt) // the handshake took one round trip
		}
	}
	return &Conn{Conn: c, path: p, binding: binding}, nil
}

// pathControl is the ControlContext of a socket on p: bound to p's
// interface (to its address only, which *binding then says, where the OS
// has no interface binding or refuses it), then more's options (if any),
// the intents' DSCP, and the caller's Control or ControlContext.
func (d *Dialer) pathControl(p *Path, binding *Binding, more func(network string, c syscall.RawConn)) controlFunc {
	return chainControl(func(ctx context.Context, nw, _ string, c syscall.RawConn) error {
		err := sockopt.BindToInterface(c, p.Index, p.Name, strings.HasSuffix(nw, "6"))
		if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EPERM) {
			*binding = BindSource
		} else if err != nil {
			return err
		}
		if more != nil {
			more(nw, c)
		}
		d.markDSCP(ctx, nw, c)
		return nil
	}, d.Control, d.ControlContext)
}

// probeRTT connects to dest through p and closes the connection at once:
// the handshake is recorded as a probe of p's RTT (pathDial.one). The
// connection is never used; the error says whether it was made.
func (d *Dialer) probeRTT(ctx context.Context, m *Manager, p *Path, dest Destination) error {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, probeKey{}, true), probeRTTTimeout)
	defer cancel()
	c, err := d.dialChoice(ctx, m, "tcp", dest.Host, dest.Port, Choice{Path: p}, MultipathOff)
	if err == nil {
		c.Close()
	}
	return err
}

// probeRTTTimeout bounds a probe: a handshake that takes longer tells
// nothing a retransmission did not already spoil (see initialRTO).
const probeRTTTimeout = 3 * time.Second

// initialRTO is TCP's initial retransmission timeout (RFC 6298, Linux's
// TCP_TIMEOUT_INIT): a handshake this slow resent its SYN or SYN-ACK.
const initialRTO = time.Second

// plan is the ordered list of paths to dial for one destination.
type plan struct {
	choices []Choice // Path nil: operating system routing
	intent  Multipath
}

func (pl *plan) multipath(c Choice) Multipath {
	if c.MPTCP && pl.intent == MultipathUnspecified {
		return MultipathAggregate
	}
	return pl.intent
}

// dialChoice dials one choice of a decision: on its path, or routed by the
// OS when it has none.
func (d *Dialer) dialChoice(ctx context.Context, m *Manager, network, host string, port uint16, c Choice, intent Multipath) (net.Conn, error) {
	ctx, cancel := d.withDeadline(ctx)
	defer cancel()
	pl := plan{intent: intent}
	if c.Path != nil && m == nil { // chosen by DefaultManager for constrained intents
		var err error
		if m, err = DefaultManager(); err != nil {
			return nil, err
		}
	}
	if c.Path == nil {
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		return d.netDialer(pl.multipath(c)).DialContext(ctx, network, m.osAddress(host, port, addr))
	}
	return d.dialPath(ctx, m, network, host, port, c.Path, pl.multipath(c))
}

// markDSCP sets the DSCP of the intents in ctx, if MarkDSCP is on. A
// socket that cannot be marked is sent unmarked.
func (d *Dialer) markDSCP(ctx context.Context, network string, c syscall.RawConn) {
	if !d.MarkDSCP {
		return
	}
	in, _ := FromContext(ctx)
	if dscp := in.DSCP(); dscp != dscpDefault {
		_ = sockopt.SetDSCP(c, dscp, strings.HasSuffix(network, "6"))
	}
}

// BindDialer returns a copy of base (nil: a zero net.Dialer) whose sockets
// are bound to the path that m's policy (nil m: DefaultManager's) picks, for
// the intents in the dial's context, for each address it connects to: the
// way to path-bound connections where an API insists on a *net.Dialer
// (tls.Dialer.NetDialer, libraries taking one). base's own Control or
// ControlContext still runs, after the binding. Names are resolved by the
// net.Dialer (the system resolver), not per path; the source address
// follows the bound interface. A dial whose intents permit no path fails
// with a *NoPathError; a decision for system routing binds nothing.
func (m *Manager) BindDialer(base *net.Dialer) *net.Dialer {
	var d net.Dialer
	if base != nil {
		d = *base
	}
	d.ControlContext = chainControl(func(ctx context.Context, network, address string, c syscall.RawConn) error {
		mgr := m
		if mgr == nil {
			var err error
			if mgr, err = DefaultManager(); err != nil {
				return err
			}
		}
		host, port, err := splitHostPort(ctx, network, address)
		if err != nil {
			return err
		}
		pl, err := mgr.plan(ctx, network, host, port, false)
		if err != nil {
			return err
		}
		if p := pl.choices[0].Path; p != nil {
			err := sockopt.BindToInterface(c, p.Index, p.Name, strings.HasSuffix(network, "6"))
			if err != nil && !errors.Is(err, errors.ErrUnsupported) {
				return fmt.Errorf("intents: binding to %s: %w", p.Name, err)
			}
		}
		return nil
	}, d.Control, d.ControlContext)
	d.Control = nil
	return &d
}
