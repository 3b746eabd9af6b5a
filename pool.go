package intents

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Pool defaults: the limits of the browsers the Socket Intents paper
// measured and of its simulator. A Transport has no limits unless set (as
// http.DefaultTransport); the page-load benchmark sets these.
const (
	DefaultMaxConnsPerHost = 6
	DefaultMaxConns        = 17
	defaultIdleTimeout     = 30 * time.Second
)

// PathStats count a Pool's or a Transport's connections on one path (""
// for OS routing) and, for a Transport, the requests it sent there and
// the response bodies it read: the goodput samples of the path estimator.
type PathStats struct {
	Idle   int   // connections with nothing in flight
	Active int   // connections with requests in flight
	Reuses int64 // times a pooled connection was handed out again
	Dials  int64 // connections opened
	// Migrated counts connections that moved onto this path, their
	// requests with them, when theirs went down (HTTP/3).
	Migrated int64

	// A Transport's requests: a Pool leaves these zero.
	Requests      int64
	BytesReceived int64         // response body bytes read
	ReceiveTime   time.Duration // time from the response headers to the end of each body read
	// Moved counts the responses moved away from this path, to be fetched
	// on another (see Mover).
	Moved int64
	// Split counts the parts of responses arriving on this path that
	// were asked for on another (see Splitter).
	Split int64
	// Resumed counts the response bodies that broke off on this path and
	// asked for their rest by range on another connection: their path
	// went down, or their connection stalled, waiting out a retransmission
	// timeout while the path answered (see Transport).
	Resumed int64
}

// Pool keeps connections for request/response protocols over TCP and lets
// the policy choose, per request, between reusing one and opening a new one
// on some path: the paper's socketconnect / socketrelease / socketclose.
// Get hands out a connection, Release makes it reusable, Close ends it.
//
// Connections are keyed by network and address and bucketed by path. Before
// an idle connection is handed out again it is checked alive. The zero Pool
// routes by the operating system (and uses DefaultManager for intents that
// constrain paths), with the defaults below; a Pool must not be copied
// after first use.
type Pool struct {
	// Manager supplies paths and policy. nil: operating system routing,
	// and DefaultManager for requests whose intents constrain paths.
	Manager *Manager
	// Dialer dials new connections (its Timeout, KeepAlive, Control...);
	// nil uses a zero Dialer. Its Manager is ignored for the Pool's.
	Dialer *Dialer
	// MaxConnsPerHost limits connections per destination (default 6;
	// negative: no limit).
	MaxConnsPerHost int
	// MaxConns limits connections in total (default 17; negative: no
	// limit); at the limit, the longest idle connection is closed to make
	// room.
	MaxConns int
	// IdleTimeout closes connections idle this long (default 30s;
	// negative: never).
	IdleTimeout time.Duration

	once sync.Once
	core *core
}

func (p *Pool) init() {
	p.once.Do(func() {
		l := limits{maxPerHost: p.MaxConnsPerHost, maxTotal: p.MaxConns, idleTimeout: p.IdleTimeout}
		if l.maxPerHost == 0 {
			l.maxPerHost = DefaultMaxConnsPerHost
		}
		if l.maxTotal == 0 {
			l.maxTotal = DefaultMaxConns
		}
		if l.idleTimeout == 0 {
			l.idleTimeout = defaultIdleTimeout
		}
		m, d := p.Manager, p.dialer()
		p.core = newCore(m, coreConfig{limits: l, measure: func(ctx context.Context, path *Path, dest Destination) {
			d.probeRTT(ctx, m, path, dest)
		}})
	})
}

// Get returns a connection to address for the intents in ctx, and whether
// it was pooled before. It waits (FIFO, until ctx ends) when the limits
// allow no new connection and none is free. Call Release to make the
// connection reusable or Close to end it; one of them, exactly once.
func (p *Pool) Get(ctx context.Context, network, address string) (*PooledConn, bool, error) {
	p.init()
	host, port, err := splitHostPort(ctx, network, address)
	if err != nil {
		return nil, false, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	in, _ := FromContext(ctx)
	dest := Destination{Network: network, Host: host, Port: port}
	d := p.dialer()
	key := network + " " + net.JoinHostPort(host, strconv.Itoa(int(port)))
	g, err := p.core.acquire(ctx, connRequest{key: key, dest: dest, in: in}, func(ctx context.Context, ch Choice) (pooled, net.Conn, error) {
		nc, err := d.dialChoice(ctx, p.core.m, network, host, port, ch, in.Multipath)
		if err != nil {
			return nil, nil, err
		}
		return &rawConn{nc: nc}, nc, nil
	})
	if err != nil {
		var oe *net.OpError
		if !errors.As(err, &oe) && !errors.Is(err, errPoolClosed) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			err = &net.OpError{Op: "dial", Net: network, Err: err}
		}
		return nil, false, err
	}
	return &PooledConn{Conn: g.e.raw, core: p.core, e: g.e}, g.reused, nil
}

func (p *Pool) dialer() *Dialer {
	if p.Dialer == nil {
		return &Dialer{}
	}
	return p.Dialer
}

// Stats returns per-path counts; the key "" is connections the OS routed.
func (p *Pool) Stats() map[string]PathStats {
	p.init()
	return p.core.pathStats()
}

// CloseIdle closes the connections that are not handed out.
func (p *Pool) CloseIdle() {
	p.init()
	p.core.closeIdle()
}

// Close closes every pooled connection, fails waiting Gets and makes later
// Gets fail with an error that is net.ErrClosed (errors.Is). Connections
// handed out stay usable until released or closed.
func (p *Pool) Close() error {
	p.init()
	p.core.close()
	return nil
}

// rawConn is a connection lent out whole.
type rawConn struct {
	nc     net.Conn
	inUse  atomic.Bool
	closed atomic.Bool
}

func (r *rawConn) available() int {
	if r.inUse.Load() || r.closed.Load() {
		return 0
	}
	return 1
}

func (r *rawConn) inFlight() int {
	if r.inUse.Load() && !r.closed.Load() {
		return 1
	}
	return 0
}

func (r *rawConn) reserve() bool    { return !r.closed.Load() && r.inUse.CompareAndSwap(false, true) }
func (r *rawConn) unreserve()       { r.inUse.Store(false) }
func (r *rawConn) dead() bool       { return r.closed.Load() }
func (r *rawConn) ownReader() bool  { return false }
func (r *rawConn) carrier() carrier { return carrierWhole }
func (r *rawConn) requests() int    { return r.inFlight() }

func (r *rawConn) close() error {
	r.closed.Store(true)
	return r.nc.Close()
}

// PooledConn is a connection from a Pool. Reads and writes count towards
// the pool's per-connection statistics, which the policy sees.
type PooledConn struct {
	net.Conn
	core *core
	e    *entry
	done atomic.Bool
}

// Read reads from the connection. When its path went down, the error is a
// *PathDownError.
func (c *PooledConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.e.bytesIn.Add(int64(n))
	return n, c.e.pathErr(err)
}

// Write writes to the connection. When its path went down, the error is a
// *PathDownError.
func (c *PooledConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.e.bytesOut.Add(int64(n))
	return n, c.e.pathErr(err)
}

// Path returns the path of the connection (nil if the OS routed it).
func (c *PooledConn) Path() *Path { return c.e.path }

// Release hands the connection back for reuse. The caller must not use it
// afterwards; it must have read everything of the last response.
func (c *PooledConn) Release() {
	if c.done.Swap(true) {
		return
	}
	if s := &c.core.sched; s.tracksLoops() {
		s.loops.ended(c.e.key, time.Now())
	}
	c.core.release(c.e, c.e.pending.Load()) // whatever did not come will not
}

// Close closes the connection and removes it from the pool.
func (c *PooledConn) Close() error {
	if c.done.Swap(true) {
		return nil
	}
	c.e.addPending(-c.e.pending.Load())
	err := c.e.c.close()
	c.core.changed(c.e)
	return err
}

// hasLocalAddr reports whether p still has c's local address: a connection
// from an address that is gone is dead.
func hasLocalAddr(p *Path, c net.Conn) bool {
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	return err != nil || slices.Contains(p.Addrs, ap.Addr().Unmap())
}
