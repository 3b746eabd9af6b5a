package intents

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/h3conn"
)

// HTTP3Dialer opens HTTP/3 connections for a Transport (see
// Transport.HTTP3): package github.com/sockintents/intents/h3's Dialer,
// over quic-go. It is an interface so that programs that never speak
// HTTP/3 do not build QUIC. What it returns is an internal type, so only
// this module implements it: the pool's needs of an HTTP/3 connection
// (probes, path moves, counters) can change with the pool, as net/http
// keeps its own HTTP/2 plug-in unexported.
type HTTP3Dialer interface {
	// DialHTTP3 opens an HTTP/3 connection to remote over pc, a UDP socket
	// on the path the policy chose (a *PacketConn; a *net.UDPConn where
	// the operating system routes), and returns once its handshake is
	// done. The connection owns pc from then on: closing it closes pc; so
	// does a failed dial. tlsConf is the Transport's TLS configuration for
	// the origin, with its ServerName and NextProtos ("h3") set. A dial
	// ends when ctx does.
	DialHTTP3(ctx context.Context, pc net.PacketConn, remote netip.AddrPort, tlsConf *tls.Config) (h3conn.Conn, error)
}

// ErrUnprocessed is matched by the error of a request the server cannot
// have processed: no stream could be opened, the server refused the
// stream or the connection before it took the request (a graceful
// GOAWAY). The Transport sends such a request again on another
// connection, whatever its method, as net/http does; one it gave up
// sending again fails with an error that matches ErrUnprocessed (over
// HTTP/1.1, HTTP/2 and HTTP/3), and the caller may send it once more.
var ErrUnprocessed = errors.New("intents: request not processed by the server")

// HTTP3 defaults.
const (
	// defaultHTTP3RaceDelay is how long a new HTTP/3 connection has to
	// finish its handshake before a TCP connection is started beside it
	// (Happy Eyeballs' 250 ms, RFC 8305).
	defaultHTTP3RaceDelay = 250 * time.Millisecond
	// http3Streams is how many requests the pool sends on one HTTP/3
	// connection at once: quic-go's default stream limit for its peer
	// (a server that allows fewer makes the rest wait for a stream).
	http3Streams = 100
	// brokenHTTP3 is how long an origin whose HTTP/3 failed or lost the
	// race is left on TCP, doubled on each repeated failure up to
	// maxBrokenHTTP3 (as Chrome's broken alternative services).
	brokenHTTP3    = 5 * time.Minute
	maxBrokenHTTP3 = 24 * time.Hour
)

// h3Conn is an h3conn.Conn in the pool. Its requests are counted here: a
// stream is in use from the request's slot until its response body is
// read to the end or closed.
type h3Conn struct {
	c       h3conn.Conn
	streams atomic.Int32           // slots taken whose response is not done
	hook    atomic.Pointer[func()] // the pool's: a stream freed

	// For a migration: what opened it, to where, and the intents of the
	// requests on it, none of which may find the new path prohibited.
	dialer   *Dialer
	remote   netip.AddrPort
	opened   Intents
	mu       sync.Mutex
	active   map[uint64]context.Context // by request, while its stream is in use
	nextID   uint64
	prepared map[string]h3conn.Path // paths probed ahead, by name

	progressMu sync.Mutex
	progress   progress
}

// progress follows whether an HTTP/3 connection's path still answers
// while requests are in flight on it: a path that goes silent without a
// link event (a blackhole) is noticed from the connection itself.
type progress struct {
	last     time.Time // the last sample
	received uint64    // BytesReceived when it last changed
	since    time.Time // when it last changed
	probed   time.Time // a Probe sent since, if not zero
	resumeAt time.Time // after a move that failed: not before then
}

// stallRetryFrom keeps the connection from being taken for stalled again
// before now+stallRetry: a move found nowhere to go.
func (c *h3Conn) stallRetryFrom(now time.Time) {
	c.progressMu.Lock()
	c.progress.resumeAt = now.Add(stallRetry)
	c.progressMu.Unlock()
}

// Stall detection: with nothing received for stallProbeAfter (at least
// two smoothed RTTs) the connection probes its path; with still nothing
// received when the probe has been out two smoothed RTTs (at least
// probeAnswer) and the silence has lasted stallAfter (at least three
// smoothed RTTs), the path is taken to be dead for it (as for TCP
// connections: see deadpath.go).
const (
	stallProbeAfter = 100 * time.Millisecond
	stallAfter      = 200 * time.Millisecond
	// stallRetry: after a move that found nowhere to go.
	stallRetry = 5 * time.Second
)

// stalled samples the connection's progress at now, while requests are
// in flight on it, and reports whether its path stopped answering. Called
// by the pool's sampling ticks, outside the pool's locks.
func (c *h3Conn) stalled(now time.Time) bool {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	st := c.c.Stats()
	p := &c.progress
	gap := now.Sub(p.last)
	p.last = now
	if gap > 3*sampleInterval || st.BytesReceived != p.received || now.Before(p.resumeAt) {
		// Active again after a quiet spell, or it received: a new baseline.
		p.received, p.since, p.probed = st.BytesReceived, now, time.Time{}
		return false
	}
	switch {
	case p.probed.IsZero():
		if now.Sub(p.since) >= max(2*st.SmoothedRTT, stallProbeAfter) {
			if c.c.Probe() == nil {
				p.probed = now
			}
		}
	case now.Sub(p.probed) >= max(2*st.SmoothedRTT, probeAnswer) && now.Sub(p.since) >= max(3*st.SmoothedRTT, stallAfter):
		return true
	}
	return false
}

func (c *h3Conn) available() int {
	if c.c.Err() != nil { // closed, or a GOAWAY came: no new requests
		return 0
	}
	return max(http3Streams-int(c.streams.Load()), 0)
}
func (c *h3Conn) inFlight() int { return int(c.streams.Load()) }

// dead reports a connection that takes no new requests and carries none:
// after a GOAWAY the streams in flight finish first (RFC 9114 section
// 5.2), as on net/http's HTTP/2 connections, rather than being cut when
// the pool closes the connection as their neighbours end.
func (c *h3Conn) dead() bool       { return c.c.Err() != nil && c.streams.Load() == 0 }
func (c *h3Conn) close() error     { return c.c.Close() }
func (c *h3Conn) ownReader() bool  { return true }
func (c *h3Conn) carrier() carrier { return carrierQUIC }
func (c *h3Conn) requests() int    { return c.inFlight() }
func (c *h3Conn) unreserve()       { c.done() }

func (c *h3Conn) reserve() bool {
	if c.available() <= 0 {
		return false
	}
	c.streams.Add(1)
	return true
}

func (c *h3Conn) watch(hook func()) { c.hook.Store(&hook) }

// done gives a stream back and tells the pool, whose waiting requests
// may take it.
func (c *h3Conn) done() {
	c.streams.Add(-1)
	if h := c.hook.Load(); h != nil {
		(*h)()
	}
}

func (c *h3Conn) roundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	if c.active == nil {
		c.active = map[uint64]context.Context{}
	}
	c.active[id] = r.Context()
	c.mu.Unlock()
	finish := func() {
		c.mu.Lock()
		delete(c.active, id)
		c.mu.Unlock()
		c.done()
	}
	resp, err := c.c.RoundTrip(r)
	if err != nil {
		finish()
		return nil, err
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		finish()
		return resp, nil
	}
	resp.Body = &h3Body{ReadCloser: resp.Body, ctx: r.Context(), done: finish}
	return resp, nil
}

// prepareTimeout bounds the probes of a connection's other paths.
const prepareTimeout = 5 * time.Second

// prepare probes, for a connection just opened on path on, the other
// paths the intents it was opened with permit, so that it can move to one
// at once if on goes down: a probe sent only then may wait behind the
// congestion window of a path that delivers nothing any more (quic-go
// sends path probes only when its congestion controller lets it send),
// while switching to a path probed before resets it. It costs a UDP
// socket and a round trip of two small packets per path.
func (c *h3Conn) prepare(ctx context.Context, m *Manager, on *Path) {
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	family := c.family()
	paths, _ := permit(&c.opened, m.Paths(), family, false)
	for _, p := range paths {
		if p.Name == on.Name {
			continue
		}
		hp, err := c.addPath(ctx, p)
		if err != nil {
			continue // probed again if the move comes
		}
		c.mu.Lock()
		if c.prepared == nil {
			c.prepared = map[string]h3conn.Path{}
		}
		c.prepared[p.Name] = hp
		c.mu.Unlock()
	}
}

func (c *h3Conn) family() byte {
	if c.remote.Addr().Is6() {
		return 6
	}
	return 4
}

// addPath opens a socket on p and probes p with it.
func (c *h3Conn) addPath(ctx context.Context, p *Path) (h3conn.Path, error) {
	nw := "udp4"
	if c.family() == 6 {
		nw = "udp6"
	}
	pc, err := c.dialer.listenPath(ctx, nw, netip.Addr{}, 0, p)
	if err != nil {
		return nil, err
	}
	return c.c.AddPath(ctx, pc)
}

// migrate moves the connection off from, which went down, to the first
// path the intents it was opened with permit, in their order, that no
// request on it prohibits: the new path. A path probed ahead (prepare)
// takes it at once; another is probed first.
func (c *h3Conn) migrate(ctx context.Context, m *Manager, from *Path) (*Path, error) {
	family := c.family()
	paths, excl := permit(&c.opened, m.Paths(), family, false)
	c.mu.Lock()
	var active []Intents
	for _, rctx := range c.active {
		in, _ := FromContext(rctx)
		active = append(active, in)
	}
	c.mu.Unlock()
	var errs []*PathError
	for _, p := range paths {
		switch {
		case p.Name == from.Name:
			excl = append(excl, Exclusion{Path: p.Name, Reason: "the path it leaves"})
			continue
		case slices.ContainsFunc(active, func(in Intents) bool {
			ok, _ := permit(&in, []*Path{p}, family, false)
			return len(ok) == 0
		}):
			excl = append(excl, Exclusion{Path: p.Name, Reason: "not permitted by a request on the connection"})
			continue
		}
		c.mu.Lock()
		hp := c.prepared[p.Name]
		delete(c.prepared, p.Name)
		c.mu.Unlock()
		if hp != nil && hp.Switch() == nil {
			c.announce()
			return p, nil
		}
		hp, err := c.addPath(ctx, p)
		if err == nil {
			if err = hp.Switch(); err != nil {
				hp.Close()
			}
		}
		if err == nil {
			c.announce()
			return p, nil
		}
		errs = append(errs, &PathError{Path: p.Name, Err: err})
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, &NoPathError{Dest: "udp " + c.remote.String(), Excluded: excl}
	}
	return nil, pathErrors(errs)
}

// announce sends a packet the server acknowledges on the path just
// switched to: a client that only receives (a GET) has nothing else to
// send there, and the server keeps sending into the old path until it
// hears from the new one.
func (c *h3Conn) announce() { _ = c.c.Probe() }

// traceConn is what httptrace's GotConn is given for it: its addresses
// (quic-go's own Transport gives the same).
func (c *h3Conn) traceConn() net.Conn { return quicConnView{c.c} }

// h3Body gives its stream back once read to the end or closed. A read
// that fails once its request's context ended returns the context's
// error, as net/http's bodies do: quic-go returns the stream's reset
// (H3_REQUEST_CANCELLED), which says nothing a caller can tell a
// cancellation by.
type h3Body struct {
	io.ReadCloser
	ctx  context.Context
	once sync.Once
	done func()
}

func (b *h3Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		if err != io.EOF && b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.once.Do(b.done)
	}
	return n, err
}

func (b *h3Body) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// quicConnView shows an HTTP/3 connection's addresses as a net.Conn (for
// httptrace.GotConnInfo); its I/O methods fail.
type quicConnView struct{ c h3conn.Conn }

var errQUICView = errors.New("intents: an HTTP/3 connection has no byte stream to use")

func (v quicConnView) Read([]byte) (int, error)         { return 0, errQUICView }
func (v quicConnView) Write([]byte) (int, error)        { return 0, errQUICView }
func (v quicConnView) Close() error                     { return errQUICView }
func (v quicConnView) SetDeadline(time.Time) error      { return errQUICView }
func (v quicConnView) SetReadDeadline(time.Time) error  { return errQUICView }
func (v quicConnView) SetWriteDeadline(time.Time) error { return errQUICView }
func (v quicConnView) LocalAddr() net.Addr              { return v.c.LocalAddr() }
func (v quicConnView) RemoteAddr() net.Addr             { return v.c.RemoteAddr() }

// h3Race is raceHTTP3's state: its dials' results, how many are out,
// the first connection made, and each protocol's error.
type h3Race struct {
	results         chan h3RaceResult
	running         int
	tcpStarted      bool
	winner          *h3RaceResult
	quicErr, tcpErr error
}

// h3RaceResult is one dial's outcome.
type h3RaceResult struct {
	c    pooled
	raw  net.Conn
	err  error
	quic bool
}

// receive takes a dial's result: the first connection wins (cancel ends
// the other dial), a later one is closed. It reports whether res failed
// before any connection was made.
func (r *h3Race) receive(res h3RaceResult, cancel func()) (failed bool) {
	switch {
	case r.winner != nil: // the loser, after the cancel: closed
		if res.err == nil {
			res.c.close()
		}
	case res.err == nil:
		r.winner = &res
		cancel()
	case res.quic:
		r.quicErr = res.err
		return true
	default:
		r.tcpErr = res.err
		return true
	}
	return false
}

// outcome is the race's connection, or its error (TCP's, where it ran);
// mark is told whether HTTP/3 works where it won, and that it does not
// where TCP won without HTTP/3 failing (it lost the race).
func (r *h3Race) outcome(mark func(working bool)) (pooled, net.Conn, error) {
	switch {
	case r.winner != nil:
		if r.winner.quic {
			mark(true)
		} else if r.quicErr == nil {
			mark(false) // lost the race
		}
		return r.winner.c, r.winner.raw, nil
	case r.tcpErr != nil:
		return nil, nil, r.tcpErr
	default:
		return nil, nil, r.quicErr
	}
}

// packetConnFor opens a UDP socket for a connection to host:port on c's
// path (nil: routed by the operating system), and resolves host there:
// the socket and the address to send to. The first address of a family
// the path has is used.
func (d *Dialer) packetConnFor(ctx context.Context, m *Manager, host string, port uint16, c Choice) (net.PacketConn, netip.AddrPort, error) {
	ctx, cancel := d.withDeadline(ctx)
	defer cancel()
	const network = "udp"
	lc := listenConfig(ctx, chainControl(func(ctx context.Context, nw, _ string, c syscall.RawConn) error {
		d.markDSCP(ctx, nw, c)
		return nil
	}, d.Control, d.ControlContext))
	listenOS := func(addr netip.Addr) (net.PacketConn, netip.AddrPort, error) {
		nw := "udp4"
		if addr.Is6() {
			nw = "udp6"
		}
		pc, err := lc.ListenPacket(ctx, nw, ":0")
		if err != nil {
			return nil, netip.AddrPort{}, err
		}
		return pc, netip.AddrPortFrom(addr, port), nil
	}
	if c.Path == nil {
		addr, err := resolveOS(ctx, m, host)
		if err != nil {
			return nil, netip.AddrPort{}, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		return listenOS(addr)
	}
	if m == nil { // chosen by DefaultManager for constrained intents
		var err error
		if m, err = DefaultManager(); err != nil {
			return nil, netip.AddrPort{}, err
		}
	}
	addrs, viaLoopback, err := m.pathAddrs(ctx, network, host, c.Path)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	if viaLoopback {
		return listenOS(addrs[0])
	}
	// The first address: QUIC has no Happy Eyeballs of its own here.
	nw := "udp4"
	if addrs[0].Is6() {
		nw = "udp6"
	}
	pc, err := d.listenPath(ctx, nw, netip.Addr{}, 0, c.Path)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	return pc, netip.AddrPortFrom(addrs[0], port), nil
}

// resolveOS resolves host as the operating system would (the Manager's
// hosts file first, for names it maps to loopback).
func resolveOS(ctx context.Context, m *Manager, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	if m != nil {
		if a, ok := m.loopbackAddr(host); ok {
			return a, nil
		}
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(addrs) == 0 {
		return netip.Addr{}, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs[0].Unmap(), nil
}
