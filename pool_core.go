package intents

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/sockopt"
)

// The pool core: the lock and the parts that share it (see core), a
// request's way through them (acquire, open, release), and what the pool
// does when a connection or a path changes.

// pooled is what the pool core manages: a raw connection lent out whole
// (Pool) or an HTTP client connection with request slots (Transport).
type pooled interface {
	available() int // requests it can take now
	inFlight() int
	reserve() bool // take a slot; false if there is none (or it died)
	unreserve()    // give back a slot taken but not used, or lent out whole
	dead() bool
	close() error
	// ownReader reports whether a reader of its own (net/http's read loop)
	// watches the socket while it is idle, and reports a close or
	// unsolicited bytes through dead(), as net/http's idle connections do.
	// A connection lent out whole has none: the pool looks at its socket
	// before handing it out again.
	ownReader() bool
	// carrier is what carries its requests.
	carrier() carrier
	// requests is how many requests it carries on the wire: inFlight
	// without the slots reserved for requests not sent yet.
	requests() int
}

// carrier is what carries a pooled connection's requests, which decides
// how the pool watches it and what can be done with its requests.
type carrier int

const (
	// carrierWhole: a connection lent out whole (Pool); what it carries
	// is its caller's business.
	carrierWhole carrier = iota
	// carrierTCP: HTTP/1 or HTTP/2 over TCP; its silence is read from
	// TCP_INFO (see pathHealth.checkQuiet).
	carrierTCP
	// carrierQUIC: HTTP/3; each request a stream that can end alone.
	carrierQUIC
)

// stallWatcher is a pooled connection that tells for itself whether its
// path stopped answering it (an HTTP/3 connection, from what it received;
// TCP connections are judged from TCP_INFO instead).
type stallWatcher interface {
	stalled(now time.Time) bool
}

// entry is one pooled connection.
type entry struct {
	id      uint64
	key     string
	path    *Path // nil: routed by the OS
	mptcp   bool
	c       pooled
	raw     net.Conn // the socket, for liveness checks and traces
	created time.Time

	// guarded by core.mu
	lastUsed  time.Time
	idleSince time.Time // zero while in use
	removed   bool
	migrating bool // moving to another path: not offered to requests
	// spare: opened with no request for it (see pathHealth.prepareOthers), and none
	// granted it since
	spare bool
	// granted are the intents of the requests given it since it was last
	// idle: a spare for it goes only where they all may go.
	granted []Intents

	origin entryOrigin // what opened it: set once
	fate   entryFate   // how its connection ended (atomics)
	sample entrySample // the sampler's, under sampler.mu
	probe  entryProbe  // TCP_INFO and the liveness probe, under probe.mu

	bytesIn, bytesOut atomic.Int64
	pending           atomic.Int64 // bytes expected by requests in flight
	// answered: the response to the request it was last given has sent
	// its headers, so pending counts that body's own length.
	answered atomic.Bool
}

// entryFate is how an entry's connection ended, read by its requests
// when their reads fail, and what a request on it can do if it does.
// Atomics: set by whoever closes it, read by its requests.
type entryFate struct {
	pathDown atomic.Bool // closed because its path went away
	// stalled: closed because its body stalled while its path answered
	// (see pathHealth.resumeStalled); resumable: the body it carries
	// (HTTP/1) resumes by range from where it is; replayable: the request
	// it carries, still without a response, may be sent again elsewhere.
	stalled, resumable, replayable atomic.Bool
	// movedTo is the entry that took the connection over when it migrated
	// to another path (see pathHealth.migrate): the requests in flight
	// keep this one, and read how the connection ended from there.
	movedTo atomic.Pointer[entry]
	// stayed: its path went down or silent while it carried what cannot
	// move (see core.loseLocked), so it was left to finish out of the
	// pool; closed once says it was closed when they ended.
	stayed, closed atomic.Bool
}

// entryOrigin is what opened an entry, for a spare connection on another
// path when its own goes quiet (see pathHealth.warmSpare): a spare goes
// only where every request given the entry (entry.granted) may go. Set
// once; nil dial: no spare.
type entryOrigin struct {
	dest      Destination
	permitted []*Path
	dial      func(ctx context.Context, ch Choice) (pooled, net.Conn, error)
}

// entrySample is what the sampler keeps of an entry to feed its path's
// estimator, under sampler.mu.
type entrySample struct {
	active      bool      // counted as active on its path
	tickBytes   int64     // bytesIn at the last tick
	activeSince time.Time // when it last became active
	quietAt     time.Time // when to look at its silence again (zero: at the next tick)
}

// entryProbe is an entry's TCP_INFO counters at the last sample and its
// liveness probe (see pathHealth.checkQuiet): read from system calls
// outside every other lock, so under a lock of its own.
type entryProbe struct {
	mu                    sync.Mutex
	lastRetrans, lastSegs uint64
	probing               bool          // a probe is out
	answered              time.Duration // how quiet it was when a probe was last answered
	answeredSince         time.Time     // the activeSince of the requests it was answered for
}

func (e *entry) candidate(now time.Time) Candidate {
	return Candidate{ID: e.id, Path: e.path, MPTCP: e.mptcp, Available: e.c.available(), InFlight: e.c.inFlight(),
		Idle: now.Sub(e.lastUsed), Age: now.Sub(e.created), BytesIn: e.bytesIn.Load(), BytesOut: e.bytesOut.Load(), Pending: max(e.pending.Load(), 0),
		Answered: e.answered.Load()}
}

// needsPeek reports whether e's liveness is a question for its socket: a
// connection lent out whole, free, with no reader of its own.
func (e *entry) needsPeek() bool {
	return !e.c.ownReader() && e.raw != nil && e.c.available() > 0 && e.c.inFlight() == 0
}

// alive checks an idle connection without blocking: dead() for one with
// a reader of its own, else its socket. As net/http does for its idle
// connections (persistConn.readLoop: "Unsolicited response received on
// idle HTTP channel"), a connection lent out whole that received bytes
// while idle is not handed out again: they are no answer to the next
// user's request (a server's "421 idle timeout" before it closes, say).
// It may make a system call: never under core.mu.
func (e *entry) alive() bool {
	if e.c.dead() {
		return false
	}
	if e.c.ownReader() || e.c.inFlight() > 0 || e.raw == nil {
		return true
	}
	sc, ok := e.raw.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return sockopt.Peek(rc) == sockopt.Quiet
}

// pathErr explains err by the path going down, if it did, or by the
// connection stalling, on e's path or on a path it migrated to since.
func (e *entry) pathErr(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	switch down, stalled := e.ended(); {
	case down != nil:
		return &PathDownError{Path: pathName(down.path), Stayed: down.fate.stayed.Load(), Err: err}
	case stalled:
		return &stalledError{err}
	}
	return err
}

// ended says why e's connection was closed, on e's path or on one it
// migrated to since: the entry whose path went down, or that it stalled.
func (e *entry) ended() (down *entry, stalled bool) {
	for x := e; x != nil; x = x.fate.movedTo.Load() {
		if x.fate.pathDown.Load() || x.fate.stayed.Load() {
			return x, false
		}
		if x.fate.stalled.Load() {
			return nil, true
		}
	}
	return nil, false
}

// addPending changes the bytes e (and so its path) still expects.
func (e *entry) addPending(delta int64) {
	e.pending.Add(delta)
	e.path.addPending(delta)
}

// core is the policy-driven connection pool shared by Pool and Transport.
// It holds the lock and the parts that share it: the registry of
// connections and dials (pool_registry.go), the scheduler that hands
// them to waiting requests as the policy decides (pool_queue.go,
// pool_choose.go), the idle connections' limits (pool_idle.go), and the
// sampler that feeds the path estimators (pool_estimate.go, its own lock
// taken after this one). Its path health (path_health.go) runs beside
// it, reaching it through healthPool. The lock guards bookkeeping only:
// the policy, traces, logs and system calls run outside it.
type core struct {
	m *Manager

	mu     sync.Mutex
	closed bool
	reg    registry
	sched  scheduler
	idle   idleConns

	sampler sampler
	health  *pathHealth

	unsub     func()
	unsubOnce sync.Once
}

// coreConfig is what the owner of a pool (Pool, Transport) gives its core
// when it makes it.
type coreConfig struct {
	limits
	// measure, if set, connects to a destination through a path and closes
	// the connection at once: the handshake is a sample of the path's
	// RTT (see pathHealth.measureOthers).
	measure func(ctx context.Context, p *Path, dest Destination)
	// warm has a destination's first connection open a spare one on each
	// other path (see pathHealth.prepareOthers): a Transport's, whose
	// connections idle until a request is sent on them.
	warm bool
	// originSize, if set, is the size to expect from an origin for a URL
	// not seen and where it came from (sizeFromOrigin or sizeFromRecent;
	// "" if nothing is known; see connRequest.sizeOrigin). It takes a lock
	// of its own: never one of the pool's.
	originSize func(origin string) (int64, sizeSource)
	// originSettled, if set, reports whether the size originSize gives
	// for origin stands on enough responses for a burst of requests (see
	// scheduler.holdsForSizes). A lock of its own, as originSize.
	originSettled func(origin string) bool
}

// limits are a pool's bounds; 0 means none.
type limits struct {
	maxPerHost  int           // connections to one destination
	maxTotal    int           // connections in all
	idlePerHost int           // idle connections kept per destination (negative: none)
	idleTotal   int           // idle connections kept in all
	idleTimeout time.Duration // an idle connection is closed after this
}

func newCore(m *Manager, cfg coreConfig) *core {
	c := &core{m: m, reg: newRegistry(cfg.limits)}
	c.sched = scheduler{pool: c, originSize: cfg.originSize, originSettled: cfg.originSettled}
	c.idle = idleConns{r: &c.reg, remove: c.remove, sweep: c.sweep,
		perHost: cfg.idlePerHost, total: cfg.idleTotal, timeout: cfg.idleTimeout}
	// No spare where no idle connection is kept: it could only be closed.
	c.health = newPathHealth(m, c, cfg.warm && cfg.idlePerHost >= 0, cfg.measure)
	c.sampler.stalled = c.health.migrateStalled
	c.sampler.quiet = c.health.checkQuiet
	if m != nil {
		c.unsub = m.subscribe(c.drainGonePaths)
	}
	return c
}

func pathName(p *Path) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// grant is what a request gets from the pool: a reserved slot on a pooled
// connection (e), or the right to open a new one (dial).
type grant struct {
	e       *entry
	reused  bool          // e was pooled before
	wasIdle bool          // e had nothing in flight
	idle    time.Duration // how long e had been idle
	slot    dialSlot      // when dials()
	size    int64         // bytes the request expects, counted as pending
	held    bool          // a new connection was held back for it (see scheduler.holdsForSizes)
	err     error
}

// dials reports whether g is the right to open a new connection.
func (g grant) dials() bool { return g.e == nil && g.err == nil }

// connRequest is a request for a connection: to dest, pooled under key,
// for intents in; sizeSource says where in.SizeToBeReceived came from
// (see DecisionInfo.SizeSource).
type connRequest struct {
	key        string
	dest       Destination
	in         Intents // a copy: a pointer here would move the caller's to the heap
	sizeSource sizeSource
	// loopback says whether dest.Host is known to be a loopback host, if
	// the caller knows (a Transport, once per origin): decisions need not
	// parse it each time.
	loopback hostHint
	// sizeOrigin, if set, names the origin whose typical response size
	// (core.originSize) stands for the request's: looked up again at each
	// decision, as the responses before it teach more.
	sizeOrigin string
}

// acquire returns a granted slot on a pooled connection or, after dialing
// with dial, on a new pooled connection. On a dial failure the next choice
// is tried, with the failed path left out.
func (c *core) acquire(ctx context.Context, r connRequest,
	dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) (grant, error) {
	var skip []*Path
	var firstErr error
	for {
		log := c.m.debugLogger(ctx)
		var asked time.Time
		if log != nil {
			asked = time.Now()
		}
		g, err := c.sched.wait(ctx, r, skip)
		if log != nil {
			logGrant(ctx, log, &r.in, g, asked)
		}
		if err != nil {
			if firstErr != nil && errors.Is(err, ErrNoPath) {
				return grant{}, firstErr // every path failed: say how the first did
			}
			return grant{}, err
		}
		if g.e != nil {
			return g, nil
		}
		e, err := c.open(ctx, g.slot, &r.in, dial)
		if err == nil {
			return grant{e: e, size: g.size}, nil
		}
		if errors.Is(err, errPoolClosed) {
			return grant{}, err
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil || g.slot.path == nil {
			return grant{}, err
		}
		skip = append(skip, g.slot.path)
	}
}

// open dials the connection s allows and registers it, with a slot taken
// for the request that asked, whose intents are in (nil: a request that
// moves, see Mover).
func (c *core) open(ctx context.Context, s dialSlot, in *Intents,
	dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) (*entry, error) {
	c.health.prepareOthers(s, in, dial)
	pc, raw, err := dial(ctx, s.choice)
	if err == nil && !pc.reserve() {
		pc.close()
		err = errors.New("intents: new connection died before its first use")
	}
	if err != nil {
		c.mu.Lock()
		c.reg.endDial(s, false)
		c.mu.Unlock()
		c.sched.serve()
		return nil, err
	}
	mp := mptcpOf(raw) // a system call: before the lock
	c.mu.Lock()
	if c.closed {
		c.reg.endDial(s, false)
		c.mu.Unlock()
		pc.close()
		return nil, errPoolClosed
	}
	e := c.reg.add(s, pc, raw, mp, dial)
	c.sampler.setActive(e, true)
	e.addPending(s.size)
	c.mu.Unlock()
	c.watch(e)
	if mg, ok := pc.(migratable); ok && s.path != nil && len(s.permitted) > 1 {
		c.health.run(func() { mg.prepare(c.health.ctx, c.m, s.path) })
	}
	return e, nil
}

// watch has e's connection tell the pool of its changes, if it can (an
// HTTP connection's state hook).
func (c *core) watch(e *entry) {
	if w, ok := e.c.(interface{ watch(func()) }); ok {
		w.watch(func() { c.changed(e) })
	}
}

// logGrant logs, at debug level, what the pool gave a request and how
// long it waited: the decisions logged before say what the policy wanted,
// this what the request got. Its size is the one it was granted at: a
// size predicted from its origin's median is looked up again at each
// decision (connRequest.sizeOrigin), and the request's own intents still
// hold the one it came with.
func logGrant(ctx context.Context, log *slog.Logger, in *Intents, g grant, asked time.Time) {
	if g.err != nil {
		return
	}
	got := "new on " + pathName(g.slot.path)
	if g.e != nil {
		got = "reuse #" + strconv.FormatUint(g.e.id, 10) + " on " + pathName(g.e.path)
	}
	granted := *in
	if g.size > 0 {
		granted.SizeToBeReceived = g.size
	}
	attrs := []slog.Attr{slog.String("intents", granted.String()), slog.String("got", got), slog.Duration("waited", time.Since(asked))}
	if g.held {
		attrs = append(attrs, slog.String("held", "for the origin's first sizes"))
	}
	log.LogAttrs(ctx, slog.LevelDebug, "intents grant", attrs...)
}

// mptcpOf reports whether c runs MPTCP: a getsockopt, so never under
// core.mu. A variable for tests to watch it.
var mptcpOf = sockopt.IsMPTCP

// undo returns a grant its request did not use.
func (c *core) undo(g grant) {
	switch {
	case g.err != nil:
	case g.e == nil:
		c.mu.Lock()
		c.reg.endDial(g.slot, false)
		c.mu.Unlock()
		c.sched.serve()
	default:
		c.release(g.e, g.size)
	}
}

// release gives back a slot on e that its request is done with, with the
// bytes it still expected.
func (c *core) release(e *entry, pending int64) {
	e.addPending(-pending)
	e.c.unreserve()
	c.changed(e)
}

// loseLocked handles e, on a path that went down or went silent, under
// c.mu, and reports whether e stayed. A connection that loses nothing by
// closing (entry.recoverable: idle, or its request sent again or resumed
// by range on another path) closes. One whose requests cannot move (a
// body without a validator, a request not safe to send twice, several
// streams) stays with them, as it would in net/http, to end as its
// server, the kernel or the caller ends it: a cellular link stalls for
// tens of seconds and comes back, and nothing tells a stall from a
// blackhole until it ends. It leaves the pool meanwhile: it takes no
// other request and holds no place in the limits (the page goes on over
// the other paths), and closes once its requests end.
func (c *core) loseLocked(e *entry) (stayed bool) {
	if e.removed {
		return false
	}
	if e.recoverable() {
		e.fate.pathDown.Store(true)
		c.remove(e)
		return false
	}
	e.fate.stayed.Store(true)
	c.detach(e)
	return true
}

// remove takes e out of the pool and closes it, under c.mu.
func (c *core) remove(e *entry) {
	if e.removed {
		return
	}
	c.detach(e)
	go e.c.close() // closing may call back into the pool (state hooks)
}

// detach takes e out of the pool, under c.mu, leaving its connection
// open.
func (c *core) detach(e *entry) {
	c.reg.detach(e)
	c.sampler.setActive(e, false)
}

// changed is called when e's state may have changed (a request finished,
// a slot was released, the connection died): it removes e if dead, keeps
// the idle connections within bounds, samples e's TCP_INFO if it just went
// idle, and serves the waiters.
func (c *core) changed(e *entry) {
	c.mu.Lock()
	sample := c.changedLocked(e)
	c.sched.serveLocked()
	c.mu.Unlock()
	if sample {
		sampleTCP(e)
	}
}

// changedLocked is changed's bookkeeping, under c.mu. It reports whether e
// just went idle: its TCP_INFO is then worth a sample, which the caller
// takes after unlocking. Idle limits are applied by the serve that
// follows, once waiters had their chance at e.
func (c *core) changedLocked(e *entry) (sample bool) {
	if e.removed {
		if e.fate.stayed.Load() && e.c.inFlight() == 0 && e.fate.closed.CompareAndSwap(false, true) {
			go e.c.close() // its requests are done: see loseLocked
		}
		return false
	}
	if e.c.dead() || c.closed {
		c.remove(e)
		return false
	}
	if e.idleSince.IsZero() && e.c.inFlight() == 0 {
		now := time.Now()
		e.lastUsed, e.idleSince = now, now
		sample = e.path != nil
		clear(e.granted) // the intents' maps may go
		e.granted = e.granted[:0]
		c.sampler.setActive(e, false)
		c.idle.add(e)
	}
	return sample
}

// drainGonePaths handles the connections on paths that are gone, down or
// without the connection's address (see loseLocked): those that lose
// nothing by it close, their requests sent again or resumed elsewhere;
// the others stay with their requests, out of the pool (the link may
// come back, with the address). A connection that can migrate (HTTP/3)
// moves to another path instead, with its requests; an MPTCP one is left
// to its other subflows while another path is up.
func (c *core) drainGonePaths() {
	c.mu.Lock()
	var lost []*entry
	for _, es := range c.reg.entries {
		for _, e := range es {
			if e.path == nil || e.migrating {
				continue
			}
			p := c.m.Path(e.path.Name)
			gone := p == nil || !p.Up || !hasLocalAddr(p, e.raw)
			if !gone || (e.mptcp && c.m.otherPathUp(e.path.Name)) {
				// An MPTCP connection goes on over its subflows on the
				// other paths: the kernel moves what was in flight.
				continue
			}
			if mg, ok := e.c.(migratable); ok && !c.closed {
				e.migrating = true
				c.health.run(func() { c.health.migrate(e, mg, true) })
				continue
			}
			lost = append(lost, e)
		}
	}
	for _, e := range lost {
		c.loseLocked(e)
	}
	c.mu.Unlock()
	c.sched.serve()
}

// removeWhere removes (and closes) the entries that match, under c.mu.
func (c *core) removeWhere(match func(*entry) bool) {
	for _, es := range c.reg.entries {
		for _, e := range es { // remove leaves es as it is
			if match(e) {
				c.remove(e)
			}
		}
	}
}

// pathStats is the pool's counters per path (see Transport.Stats).
func (c *core) pathStats() map[string]PathStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg.pathStats()
}

// sweep is the idle sweeper's run: it closes the connections idle for
// the idle timeout (see idleConns.expire).
func (c *core) sweep() {
	c.mu.Lock()
	c.idle.expire(time.Now(), c.closed)
	c.mu.Unlock()
	c.sched.serve()
}

// closeIdle closes every connection with nothing in flight.
func (c *core) closeIdle() {
	c.mu.Lock()
	c.removeWhere(idle)
	c.mu.Unlock()
	c.sched.serve()
}

// close closes the idle connections (busy ones when they are released)
// and fails the waiters.
func (c *core) close() {
	c.mu.Lock()
	c.closed = true
	c.idle.stop()
	c.removeWhere(idle)
	c.sched.queue.failAll(errPoolClosed)
	c.mu.Unlock()
	c.sampler.stop()
	c.unsubscribe()
	c.health.close()
}

// unsubscribe ends the subscription to the Manager's path changes, once.
func (c *core) unsubscribe() {
	c.unsubOnce.Do(func() {
		if c.unsub != nil {
			c.unsub()
		}
	})
}
