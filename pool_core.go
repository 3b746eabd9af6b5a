package intents

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/sockopt"
	"github.com/sockintents/intents/mptcp"
)

// The pool core: the registry of connections and its limits. The queue of
// waiting requests is in pool_queue.go, how a policy's decision becomes a
// grant in pool_choose.go, idle connections in pool_idle.go, and feeding
// the path estimators in pool_estimate.go.

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
	// TCP_INFO (see core.checkQuiet).
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
	// spare: opened with no request for it (see prepareOthers), and none
	// granted it since
	spare bool

	pathDown atomic.Bool // closed because its path went away
	// stalled: closed because its body stalled while its path answered
	// (see core.resumeStalled); resumable: the body it carries (HTTP/1)
	// resumes by range from where it is; replayable: the request it
	// carries, still without a response, may be sent again elsewhere.
	stalled, resumable, replayable atomic.Bool
	// movedTo is the entry that took the connection over when it migrated
	// to another path (see core.migrate): the requests in flight keep this
	// one, and read how the connection ended from there.
	movedTo atomic.Pointer[entry]

	// What opened it, for a spare connection on another path when its
	// own goes quiet (see core.warmSpareLocked); nil dial: none. granted
	// are the intents of the requests given it since it was last idle,
	// under core.mu: a spare goes only where they all may go.
	dest      Destination
	permitted []*Path
	dial      func(ctx context.Context, ch Choice) (pooled, net.Conn, error)
	granted   []Intents

	// estimator feeding, guarded by sampler.mu
	active      bool      // counted as active on its path
	tickBytes   int64     // bytesIn at the last tick
	activeSince time.Time // when it last became active
	quietAt     time.Time // when to look at its silence again (zero: at the next tick)

	// TCP_INFO counters at the last sample: sampled outside every lock
	// (a system call), so under a lock of their own.
	sampleMu              sync.Mutex
	lastRetrans, lastSegs uint64
	// A quiet connection's liveness probe (see core.checkQuiet), under
	// sampleMu too.
	probing       bool          // a probe is out
	answered      time.Duration // how quiet it was when a probe was last answered
	answeredSince time.Time     // the activeSince of the requests it was answered for

	bytesIn, bytesOut atomic.Int64
	pending           atomic.Int64 // bytes expected by requests in flight
}

func (e *entry) candidate(now time.Time) Candidate {
	return Candidate{ID: e.id, Path: e.path, MPTCP: e.mptcp, Available: e.c.available(), InFlight: e.c.inFlight(),
		Idle: now.Sub(e.lastUsed), Age: now.Sub(e.created), BytesIn: e.bytesIn.Load(), BytesOut: e.bytesOut.Load(), Pending: max(e.pending.Load(), 0)}
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
		return &PathDownError{Path: pathName(down.path), Err: err}
	case stalled:
		return &stalledError{err}
	}
	return err
}

// ended says why e's connection was closed, on e's path or on one it
// migrated to since: the entry whose path went down, or that it stalled.
func (e *entry) ended() (down *entry, stalled bool) {
	for x := e; x != nil; x = x.movedTo.Load() {
		if x.pathDown.Load() {
			return x, false
		}
		if x.stalled.Load() {
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

// core is the policy-driven connection pool shared by Pool and Transport:
// the connections by destination, the dials under way, and the limits on
// both. Its lock guards bookkeeping only: the policy, traces, logs and
// system calls run outside it.
type core struct {
	m *Manager
	coreConfig

	mu      sync.Mutex
	entries map[string][]*entry // by key
	dialing map[dialKey]int     // dials in progress, by key and path
	total   int                 // entries plus dials in progress
	queue   waitQueue
	stats   map[string]*PathStats
	nextID  uint64
	closed  bool
	sweeper *time.Timer // closes idle connections; armed while there are any

	// serving is set while a goroutine hands grants to the queue (serve);
	// again asks it for another pass, for changes made meanwhile.
	serving, again bool
	// wentIdle are the connections gone idle since the last serve: kept
	// within the idle limits once the waiters had their chance at them.
	wentIdle []*entry

	unsub         func()
	unsubOnce     sync.Once
	sampler       sampler
	measuring     sync.WaitGroup // runs of measure; close ends them
	stopMeasuring context.CancelFunc
	measureCtx    context.Context

	testHookQueued func() // called under mu when a request joins the queue
}

// coreConfig is what the owner of a pool (Pool, Transport) gives its core
// when it makes it.
type coreConfig struct {
	limits
	// measure, if set, connects to a destination through a path and closes
	// the connection at once: the handshake is a sample of the path's
	// RTT (see measureOthers). Its runs end by close.
	measure func(ctx context.Context, p *Path, dest Destination)
	// warm has a destination's first connection open a spare one on each
	// other path (see prepareOthers): a Transport's, whose connections
	// idle until a request is sent on them.
	warm bool
	// originSize, if set, is the size to expect from an origin for a URL
	// not seen and where it came from (SizeFromOrigin or SizeFromRecent;
	// "" if nothing is known; see connRequest.sizeOrigin). It takes a lock
	// of its own: never one of the pool's.
	originSize func(origin string) (int64, SizeSource)
	// originSettled, if set, reports whether the size originSize gives
	// for origin stands on enough responses for a burst of requests (see
	// holdsForSizes). A lock of its own, as originSize.
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
	c := &core{m: m, coreConfig: cfg,
		entries: map[string][]*entry{}, dialing: map[dialKey]int{}, stats: map[string]*PathStats{}}
	c.measureCtx, c.stopMeasuring = context.WithCancel(context.Background())
	c.sampler.stalled = c.migrateStalled
	c.sampler.quiet = c.checkQuiet
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

func (c *core) stat(p *Path) *PathStats {
	s := c.stats[pathName(p)]
	if s == nil {
		s = &PathStats{}
		c.stats[pathName(p)] = s
	}
	return s
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
	held    bool          // a new connection was held back for it (see holdsForSizes)
	err     error
}

// dials reports whether g is the right to open a new connection.
func (g grant) dials() bool { return g.e == nil && g.err == nil }

// dialSlot is the right to open one connection to key over path: counted
// against the pool's limits, and at once as load on the path, so that
// decisions made while the dial is under way see it. endDial is the one
// place its counts are given back.
type dialSlot struct {
	key       string
	dest      Destination
	path      *Path
	choice    Choice
	size      int64
	permitted []*Path // the paths the request may use
}

// dialKey names the dials in progress to one destination over one path.
type dialKey struct {
	key  string
	path *Path
}

// takeDialSlot counts a new dial to key on ch.Path, under c.mu.
func (c *core) takeDialSlot(key string, dest Destination, permitted []*Path, ch Choice, size int64) dialSlot {
	c.dialing[dialKey{key, ch.Path}]++
	c.total++
	ch.Path.addActive(1)
	ch.Path.addPending(size)
	return dialSlot{key: key, dest: dest, path: ch.Path, choice: ch, size: size, permitted: permitted}
}

// endDial gives back the counts of s, under c.mu: all of them if the dial
// failed or was not used; if it opened a connection, the connection now
// holds its place in the total and its path's counts are the entry's.
func (c *core) endDial(s dialSlot, opened bool) {
	k := dialKey{s.key, s.path}
	switch n := c.dialing[k]; {
	case n > 1:
		c.dialing[k] = n - 1
	case n == 1:
		delete(c.dialing, k)
	default:
		panic("intents: dial slot given back twice")
	}
	if !opened {
		if c.total--; c.total < 0 {
			panic("intents: pool total below zero")
		}
	}
	s.path.addActive(-1)
	s.path.addPending(-s.size)
}

// dialingTo counts the dials in progress to a destination, over any path;
// under c.mu. The map holds only dials under way: a few entries.
func (c *core) dialingTo(key string) int {
	n := 0
	for k, d := range c.dialing {
		if k.key == key {
			n += d
		}
	}
	return n
}

// connRequest is a request for a connection: to dest, pooled under key,
// for intents in; sizeSource says where in.SizeToBeReceived came from
// (see DecisionInfo.SizeSource).
type connRequest struct {
	key        string
	dest       Destination
	in         Intents // a copy: a pointer here would move the caller's to the heap
	sizeSource SizeSource
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
		g, err := c.wait(ctx, r, skip)
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
		if errors.Is(err, ErrPoolClosed) {
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
	c.prepareOthers(s, in, dial)
	pc, raw, err := dial(ctx, s.choice)
	if err == nil && !pc.reserve() {
		pc.close()
		err = errors.New("intents: new connection died before its first use")
	}
	if err != nil {
		c.mu.Lock()
		c.endDial(s, false)
		c.mu.Unlock()
		c.serve()
		return nil, err
	}
	mp := mptcpOf(raw) // a system call: before the lock
	c.mu.Lock()
	if c.closed {
		c.endDial(s, false)
		c.mu.Unlock()
		pc.close()
		return nil, ErrPoolClosed
	}
	e := c.addLocked(s, pc, raw, mp, dial)
	c.sampler.setActive(e, true)
	e.addPending(s.size)
	c.mu.Unlock()
	c.watch(e)
	if mg, ok := pc.(migratable); ok && s.path != nil && len(s.permitted) > 1 {
		c.measuring.Go(func() { mg.prepare(c.measureCtx, c.m, s.path) })
	}
	return e, nil
}

// addLocked puts the connection that s's dial opened in the pool, under
// c.mu; the slot's place in the limits becomes the entry's. mptcp says
// whether it runs MPTCP (see mptcpOf: read before the lock).
func (c *core) addLocked(s dialSlot, pc pooled, raw net.Conn, mptcp bool, dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) *entry {
	now := time.Now()
	e := &entry{key: s.key, path: s.path, c: pc, raw: raw, created: now, lastUsed: now, mptcp: mptcp,
		dest: s.dest, permitted: s.permitted, dial: dial}
	c.nextID++
	e.id = c.nextID
	c.endDial(s, true)
	c.entries[s.key] = append(c.entries[s.key], e)
	c.stat(s.path).Dials++
	return e
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
// hold the one it came with (traced: grants logged at 10 kB after
// decisions at 1 kB).
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
var mptcpOf = isMPTCP

func isMPTCP(c net.Conn) bool {
	if ic, ok := c.(*Conn); ok {
		c = ic.Conn
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	m, err := tc.MultipathTCP()
	return err == nil && m
}

// undo returns a grant its request did not use.
func (c *core) undo(g grant) {
	switch {
	case g.err != nil:
	case g.e == nil:
		c.mu.Lock()
		c.endDial(g.slot, false)
		c.mu.Unlock()
		c.serve()
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
	e.removed = true
	c.sampler.setActive(e, false)
	es := c.entries[e.key]
	if i := slices.Index(es, e); i >= 0 {
		// A new slice, not slices.Delete in place: callers iterate views of
		// the old one (a sweep) while removing.
		c.entries[e.key] = append(es[:i:i], es[i+1:]...)
		if len(c.entries[e.key]) == 0 {
			delete(c.entries, e.key)
		}
		c.total--
	}
}

// changed is called when e's state may have changed (a request finished,
// a slot was released, the connection died): it removes e if dead, keeps
// the idle connections within bounds, samples e's TCP_INFO if it just went
// idle, and serves the waiters.
func (c *core) changed(e *entry) {
	c.mu.Lock()
	sample := c.changedLocked(e)
	c.serveLocked()
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
		c.armSweeper()
		c.wentIdle = append(c.wentIdle, e)
	}
	return sample
}

// drainGonePaths closes the connections on paths that are gone, down or
// without the connection's address, busy ones too: their requests could
// only hang. Those requests fail with a PathDownError. A connection that
// can migrate (HTTP/3) moves to another path instead, with its requests;
// an MPTCP one is left to its other subflows while another path is up.
func (c *core) drainGonePaths() {
	c.mu.Lock()
	c.removeWhere(func(e *entry) bool {
		if e.path == nil || e.migrating {
			return false
		}
		p := c.m.Path(e.path.Name)
		gone := p == nil || !p.Up || !hasLocalAddr(p, e.raw)
		if !gone || (e.mptcp && c.otherPathUp(e.path.Name)) {
			// An MPTCP connection goes on over its subflows on the other
			// paths: the kernel moves what was in flight.
			return false
		}
		if mg, ok := e.c.(migratable); ok && !c.closed {
			e.migrating = true
			c.measuring.Go(func() { c.migrate(e, mg, true) })
			return false
		}
		e.pathDown.Store(true)
		return true
	})
	c.mu.Unlock()
	c.serve()
}

// otherPathUp reports whether a path other than the one named is up (not
// loopback).
func (c *core) otherPathUp(name string) bool {
	for _, p := range c.m.Paths() {
		if p.Name != name && p.Up && p.Type != TypeLoopback {
			return true
		}
	}
	return false
}

// removeWhere removes (and closes) the entries that match, under c.mu.
func (c *core) removeWhere(match func(*entry) bool) {
	for _, es := range c.entries {
		for _, e := range es { // remove leaves es as it is
			if match(e) {
				c.remove(e)
			}
		}
	}
}

func (c *core) pathStats() map[string]PathStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]PathStats, len(c.stats))
	for name, s := range c.stats {
		out[name] = PathStats{Reuses: s.Reuses, Dials: s.Dials, Migrated: s.Migrated}
	}
	for _, es := range c.entries {
		for _, e := range es {
			s := out[pathName(e.path)]
			if e.c.inFlight() > 0 {
				s.Active++
			} else {
				s.Idle++
			}
			out[pathName(e.path)] = s
		}
	}
	return out
}

// closeIdle closes every connection with nothing in flight.
func (c *core) closeIdle() {
	c.mu.Lock()
	c.removeWhere(idle)
	c.mu.Unlock()
	c.serve()
}

// close closes the idle connections (busy ones when they are released)
// and fails the waiters.
func (c *core) close() {
	c.mu.Lock()
	c.closed = true
	if c.sweeper != nil {
		c.sweeper.Stop()
		c.sweeper = nil
	}
	c.removeWhere(idle)
	c.queue.failAll(ErrPoolClosed)
	c.mu.Unlock()
	c.sampler.stop()
	c.unsubscribe()
	if c.stopMeasuring != nil {
		c.stopMeasuring()
	}
	c.measuring.Wait()
}

// prepareOthers readies, while s's connection is dialed, the request's
// other permitted paths for the requests that may follow it.
//
// If the pool warms (a Transport) and s is the destination's first
// connection (none open yet), a spare connection is opened on each other
// path the request may use that is up, answers, is neither expensive nor
// constrained, and which the request does not avoid, as far as the limits
// allow and if idle connections are kept at all: its handshake measures
// the path's RTT, and a request the policy sends there later finds the
// connection open, a round trip sooner (two with TLS), its handshakes
// done while the first path fetched the first response. An unused spare
// is an idle connection like any other: closed by the idle limits, or to
// make room at the host's limit, where it goes first (see closeIdleOf). At
// most one per path each time a destination is first contacted: its
// connections after the first do not warm again.
//
// Every other path that has no RTT yet and gets no spare is measured with
// a bare handshake (see measureOthers).
func (c *core) prepareOthers(s dialSlot, in *Intents, dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) {
	if s.path == nil || len(s.permitted) < 2 || s.dest.Network != "tcp" {
		return
	}
	var warmed []*Path
	if c.warm && in != nil && dial != nil && c.idlePerHost >= 0 { // negative: no idle connection is kept
		c.mu.Lock()
		if !c.closed && len(c.entries[s.key]) == 0 {
			for _, p := range s.permitted {
				if p.Name != s.path.Name && warmable(p, in) && c.dialing[dialKey{s.key, p}] == 0 && c.roomFor(s.key) {
					c.openSpareLocked(s.key, s.dest, s.permitted, p, warmTimeout, dial)
					warmed = append(warmed, p)
				}
			}
		}
		c.mu.Unlock()
	}
	c.measureOthers(s, warmed)
}

// warmTimeout bounds the dial of a warmed spare connection: it holds a
// place in the limits while it dials, and a handshake this slow has
// measured a retransmission, not the path (see probeRTTTimeout).
const warmTimeout = probeRTTTimeout

// warmable reports whether a spare connection for a request with intents
// in may be opened on p before the request's policy sent anything there
// (see prepareOthers): not where a connection costs (expensive or
// constrained), nor where the request would rather not go.
func warmable(p *Path, in *Intents) bool {
	if !p.Up || !responsive(p) || p.Expensive || p.Constrained {
		return false
	}
	if in.Multipath == MultipathHandover && mptcp.Supported() == nil {
		// An MPTCP handover connection has a backup subflow on the other
		// paths already. A spare would be a handover connection that
		// starts there, and an endpoint's backup flag (one per address,
		// for every connection) cannot be backup for the first and not
		// for the spare: the first's backup subflow would carry data.
		return false
	}
	l, _ := effectiveLevel(in, p)
	return l != LevelAvoid && l != LevelProhibit
}

// measureOthers measures, while s's connection is dialed, the RTT of the
// request's other permitted paths that have none yet and no spare
// connection dialing (warmed): a policy that knows no RTT for a path
// either avoids it (and never learns) or tries it with a request (which
// waits for it if the path is slow). A bare handshake, one per path at a
// time, tells it at the cost of a SYN.
func (c *core) measureOthers(s dialSlot, warmed []*Path) {
	if c.measure == nil || s.path == nil || s.dest.Network != "tcp" {
		return
	}
	for _, p := range s.permitted {
		if p == s.path || !p.Up || p.est == nil || p.Estimate().Measured ||
			slices.Contains(warmed, p) || !p.est.StartProbe() {
			continue
		}
		c.measuring.Go(func() {
			defer p.est.EndProbe()
			c.measure(c.measureCtx, p, s.dest)
		})
	}
}

// unsubscribe ends the subscription to the Manager's path changes, once.
func (c *core) unsubscribe() {
	c.unsubOnce.Do(func() {
		if c.unsub != nil {
			c.unsub()
		}
	})
}
