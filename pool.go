package intents

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/sockopt"
	"github.com/sockintents/intents/internal/tcpinfo"
)

// Pool defaults: the limits of the browsers the Socket Intents paper
// measured and of its simulator. A Transport has no limits unless set (as
// http.DefaultTransport); the page-load benchmark sets these.
const (
	DefaultMaxConnsPerHost = 6
	DefaultMaxConns        = 17
	DefaultIdleTimeout     = 30 * time.Second
)

// pooled is what the pool core manages: a raw connection lent out whole
// (Pool) or an HTTP client connection with request slots (Transport).
type pooled interface {
	available() int // requests it can take now
	inFlight() int
	reserve() bool // take a slot; false if there is none (or it died)
	unreserve()    // give back a slot taken but not used
	dead() bool
	close()
	// ownReader reports whether a reader of its own (net/http's read loop)
	// watches the socket while it is idle, and reports a close or
	// unsolicited bytes through dead(), as net/http's idle connections do.
	// A connection lent out whole has none: the pool looks at its socket
	// before handing it out again.
	ownReader() bool
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

	pathDown atomic.Bool // closed because its path went away

	// estimator feeding, guarded by core.mu
	active    bool  // counted as active on its path
	tickBytes int64 // bytesIn at the last tick

	// TCP_INFO counters at the last sample: sampled outside core.mu (a
	// system call), so under a lock of their own.
	sampleMu              sync.Mutex
	lastRetrans, lastSegs uint64

	bytesIn, bytesOut atomic.Int64
	pending           atomic.Int64 // bytes expected by requests in flight
}

func (e *entry) candidate(now time.Time) Candidate {
	return Candidate{ID: e.id, Path: e.path, MPTCP: e.mptcp, Available: e.c.available(), InFlight: e.c.inFlight(),
		Idle: now.Sub(e.lastUsed), Age: now.Sub(e.created), BytesIn: e.bytesIn.Load(), BytesOut: e.bytesOut.Load(), Pending: max(e.pending.Load(), 0)}
}

// alive checks an idle connection without blocking: dead() for one with
// a reader of its own, else its socket. As net/http does for its idle
// connections (persistConn.readLoop: "Unsolicited response received on
// idle HTTP channel"), a connection lent out whole that received bytes
// while idle is not handed out again: they are no answer to the next
// user's request (a server's "421 idle timeout" before it closes, say).
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

// PathStats count a pool's connections on one path ("" for OS routing).
type PathStats struct {
	Idle   int   // connections with nothing in flight
	Active int   // connections with requests in flight
	Reuses int64 // times a pooled connection was handed out again
	Dials  int64 // connections opened
}

// grant is what an acquire gets: a reserved slot on an entry, or the right
// to dial a new connection on path (counted against the limits).
type grant struct {
	size    int64 // bytes the request expects, counted as pending
	e       *entry
	wasIdle bool
	idle    time.Duration
	dial    bool
	key     string
	path    *Path
	choice  Choice
	err     error
}

type waiter struct {
	ctx  context.Context
	key  string
	dest Destination
	in   *Intents
	skip []*Path
	ch   chan grant // buffered 1: a grant is handed over without blocking
	// wants is the busy connection the policy chose to wait for, if it
	// did: later waiters may go their own ways meanwhile, but see it
	// waiting there (Candidate.Waiting).
	wants *entry
	// timer ends a wait for a busy connection while there is room for a
	// new one; waitedOut are the connections it ended waits for.
	timer     *time.Timer
	waitedOut map[*entry]bool
	// wantsPath is the path its policy last wanted a new connection on
	// when the destination had none there and no room: it is served before
	// the queue when a connection goes idle (see serveWaiters).
	wantsPath *Path
	decided   bool // the policy was asked at least once
}

// maxWaitForBusy bounds how long a request waits for a particular busy
// connection while it could open a new one.
var maxWaitForBusy = time.Second

// waitAtMost arms w's timer: after maxWaitForBusy, w stops waiting for e
// and takes its policy's next choice. Under c.mu.
func (c *core) waitAtMost(w *waiter, e *entry) {
	w.timer = time.AfterFunc(maxWaitForBusy, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		w.timer = nil
		if w.wants != e || !slices.Contains(c.waiters, w) {
			return
		}
		if w.waitedOut == nil {
			w.waitedOut = map[*entry]bool{}
		}
		w.waitedOut[e] = true
		c.serveWaiters()
	})
}

// stopTimer stops w's timer, if armed. Under c.mu.
func (w *waiter) stopTimer() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

// core is the policy-driven connection pool shared by Pool and Transport.
type core struct {
	m *Manager
	limits

	mu        sync.Mutex
	entries   map[string][]*entry // by key
	dialing   map[dialKey]int     // dials in progress, by key and path
	total     int                 // entries plus dials in progress
	waiters   []*waiter           // FIFO
	stats     map[string]*PathStats
	nextID    uint64
	closed    bool
	unsub     func()
	unsubOnce sync.Once
	sweeper   *time.Timer // closes idle connections; armed while there are any
	ticker    *time.Timer // samples active connections; armed while there are any
	lastTick  time.Time
	windows   map[string]*deliveryWindow // by path name

	testHookQueued func() // called under mu when a request joins the queue

	// Scratch space of tryChoices, under mu: a decision's candidates and
	// choices, used within the decision only (the trace gets copies).
	candBuf   []Candidate
	choiceBuf []Choice
}

// limits are a pool's bounds; 0 means none.
type limits struct {
	maxPerHost  int           // connections to one destination
	maxTotal    int           // connections in all
	idlePerHost int           // idle connections kept per destination (negative: none)
	idleTotal   int           // idle connections kept in all
	idleTimeout time.Duration // an idle connection is closed after this
}

func newCore(m *Manager, l limits) *core {
	c := &core{m: m, limits: l,
		entries: map[string][]*entry{}, dialing: map[dialKey]int{}, stats: map[string]*PathStats{}}
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

// acquired is a reserved slot on a pooled connection.
type acquired struct {
	e       *entry
	reused  bool
	wasIdle bool          // reused, and nothing was in flight on it
	idle    time.Duration // how long it had been idle
}

// acquire returns a reserved slot on a pooled connection or, after dialing
// with dial, on a new pooled connection. On a dial failure the next choice
// is tried, with the failed path left out.
func (c *core) acquire(ctx context.Context, key string, dest Destination, in *Intents,
	dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) (acquired, error) {
	var skip []*Path
	var firstErr error
	for {
		log := c.m.debugLogger(ctx)
		var asked time.Time
		if log != nil {
			asked = time.Now()
		}
		g, err := c.wait(ctx, key, dest, in, skip)
		if log != nil {
			logGrant(ctx, log, in, g, asked)
		}
		if err != nil {
			if firstErr != nil && errors.Is(err, ErrNoPath) {
				return acquired{}, firstErr // every path failed: say how the first did
			}
			return acquired{}, err
		}
		if !g.dial {
			return acquired{e: g.e, reused: true, wasIdle: g.wasIdle, idle: g.idle}, nil
		}
		pc, raw, err := dial(ctx, g.choice)
		if err == nil && !pc.reserve() {
			pc.close()
			err = errors.New("intents: new connection died before its first use")
		}
		if err != nil {
			g.path.addActive(-1)
			g.path.addPending(-g.size)
			c.mu.Lock()
			c.dialDone(key, g.path)
			c.total--
			c.serveWaiters()
			c.mu.Unlock()
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil || g.path == nil {
				return acquired{}, err
			}
			skip = append(skip, g.path)
			continue
		}
		now := time.Now()
		e := &entry{key: key, path: g.path, c: pc, raw: raw, created: now, lastUsed: now, mptcp: isMPTCP(raw)}
		c.mu.Lock()
		c.nextID++
		e.id = c.nextID
		c.dialDone(key, g.path)
		// The dial's provisional counts become the entry's.
		g.path.addActive(-1)
		g.path.addPending(-g.size)
		if c.closed {
			c.total--
			c.mu.Unlock()
			pc.close()
			return acquired{}, ErrPoolClosed
		}
		c.entries[key] = append(c.entries[key], e)
		c.stat(g.path).Dials++
		c.setActive(e, true)
		e.addPending(g.size)
		c.mu.Unlock()
		if w, ok := pc.(interface{ watch(func()) }); ok {
			w.watch(func() { c.changed(e) })
		}
		return acquired{e: e}, nil
	}
}

// logGrant logs, at debug level, what the pool gave a request and how
// long it waited: the decisions logged before say what the policy wanted,
// this what the request got.
func logGrant(ctx context.Context, log *slog.Logger, in *Intents, g grant, asked time.Time) {
	if g.err != nil {
		return
	}
	got := "new on " + pathName(g.path)
	if !g.dial {
		got = "reuse #" + strconv.FormatUint(g.e.id, 10) + " on " + pathName(g.e.path)
	}
	log.LogAttrs(ctx, slog.LevelDebug, "intents grant", slog.String("intents", in.String()),
		slog.String("got", got), slog.Duration("waited", time.Since(asked)))
}

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

// wait asks for a grant, queueing FIFO behind earlier requests until one
// is possible or ctx ends.
func (c *core) wait(ctx context.Context, key string, dest Destination, in *Intents, skip []*Path) (grant, error) {
	w := &waiter{ctx: ctx, key: key, dest: dest, in: in, skip: skip}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return grant{}, ErrPoolClosed
	}
	if !c.queued(key) { // nobody is ahead for this destination
		if g, ok := c.try(w); ok {
			c.mu.Unlock()
			return g, g.err
		}
	}
	w.ch = make(chan grant, 1)
	c.waiters = append(c.waiters, w)
	c.serveWaiters() // earlier waiters that can go now go first; this one too, if it can
	if c.testHookQueued != nil && slices.Contains(c.waiters, w) {
		c.testHookQueued()
	}
	c.mu.Unlock()
	select {
	case g := <-w.ch:
		return g, g.err
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(c.waiters, w); i >= 0 {
			c.waiters = slices.Delete(c.waiters, i, i+1)
			w.stopTimer()
			c.mu.Unlock()
			return grant{}, ctx.Err()
		}
		c.mu.Unlock()
		// A grant was handed over as ctx ended: give it back.
		g := <-w.ch
		c.undo(g)
		return grant{}, ctx.Err()
	}
}

// queuedBytes is what the other waiters for w's destination expect to
// receive, by their size hints: load still to come, which the policy may
// weigh (see Request.Queued).
func (c *core) queuedBytes(w *waiter) int64 {
	var n int64
	for _, o := range c.waiters {
		if o != w && o.key == w.key {
			n += max(o.in.SizeToBeReceived, 0)
		}
	}
	return n
}

func (c *core) queued(key string) bool {
	for _, w := range c.waiters {
		if w.key == key {
			return true
		}
	}
	return false
}

// undo returns an unused grant.
func (c *core) undo(g grant) {
	switch {
	case g.err != nil:
	case g.dial:
		g.path.addActive(-1)
		g.path.addPending(-g.size)
		c.mu.Lock()
		c.dialDone(g.key, g.path)
		c.total--
		c.serveWaiters()
		c.mu.Unlock()
	default:
		g.e.addPending(-g.size)
		g.e.c.unreserve()
		c.changed(g.e)
	}
}

// try decides for w under c.mu: a grant, or false to keep waiting.
func (c *core) try(w *waiter) (grant, bool) { return c.tryChoices(w, nil) }

// tryChoices is try; with only set, it takes nothing but a new connection
// on only, and that only if the policy still wants it first.
func (c *core) tryChoices(w *waiter, only *Path) (grant, bool) {
	now := time.Now()
	// Drop dead connections first, so neither the policy nor the limits
	// count them.
	for _, e := range c.entries[w.key] {
		if e.c.available() > 0 && !e.alive() {
			c.remove(e)
		}
	}
	es := c.entries[w.key]
	cands := slices.Grow(c.candBuf[:0], len(es))[:len(es)]
	c.candBuf = cands
	for i, e := range es {
		cands[i] = e.candidate(now)
		for _, o := range c.waiters {
			if o.wants == e && o != w {
				// Waiting ahead for it (HTTP/1.1: one request at a time).
				cands[i].Waiting++
				cands[i].WaitingBytes += max(o.in.SizeToBeReceived, 0)
			}
		}
	}
	w.wants, w.wantsPath, w.decided = nil, nil, true
	d, err := c.m.decide(w.ctx, w.in, w.dest, cands, w.skip, c.queuedBytes(w), c.choiceBuf)
	c.choiceBuf = d.choices[:0]
	if err != nil {
		return grant{err: err}, true
	}
	for i, ch := range d.choices {
		if only != nil && (i > 0 || ch.Wait || ch.Reuse != nil || !ch.Fresh || ch.Path != only) {
			return grant{}, false
		}
		switch {
		case ch.Wait:
			return grant{}, false
		case ch.Reuse != nil:
			e := c.byID(es, ch.Reuse.ID)
			if e == nil {
				continue // closed for an earlier choice of this decision
			}
			if !c.wantedAhead(w, e) {
				if g, ok := c.reserve(w, e, now); ok {
					return g, true
				}
			}
			// A free connection on the same path does at least as well as
			// waiting for this busy one: taken in queue order, as net/http
			// hands out its connections, so a request behind cannot take
			// it first and leave this one waiting behind a long transfer.
			if g, ok := c.freeOn(w, es, e.path, now); ok {
				return g, true
			}
			if w.waitedOut[e] && c.roomFor(w.key) {
				continue // waited long enough for it: the next choice
			}
			// The policy wants this one: wait for it, but not for ever
			// while a new connection could be had (its body may be held
			// unread by the very caller that waits).
			w.wants = e
			if c.roomFor(w.key) && w.timer == nil {
				c.waitAtMost(w, e)
			}
			return grant{}, false
		default:
			if !ch.Fresh {
				if g, ok := c.freeOn(w, es, ch.Path, now); ok {
					return g, true
				}
			}
			// Only the first in line for the destination makes room by
			// closing idle connections: one passing others (see
			// serveWaiters) would close what those ahead may yet take.
			first := !c.waitingAhead(w)
			if first && !c.roomFor(w.key) && c.underHostLimit(w.key) {
				c.closeOldestIdle() // make room under the total limit, as browsers do
			}
			if i == 0 && ch.Fresh && !c.roomFor(w.key) {
				// The policy prefers a new connection on this path to what
				// the pool has: replace an idle one of this destination on
				// another path, or the host limit would keep the path unused.
				// Not for a fallback: that would close the very connection
				// a better choice may be about to free. A waiter behind
				// others may do it only for a path the destination has no
				// connection on (see serveWaiters).
				unused := c.unusedPath(w.key, es, ch.Path)
				if unused {
					w.wantsPath = ch.Path
				}
				if first || unused {
					c.closeIdleOf(es, ch.Path)
				}
			}
			es = c.entries[w.key] // without what was just closed
			if c.roomFor(w.key) {
				c.dialing[dialKey{w.key, ch.Path}]++
				c.total++
				// Count the dial on its path at once, so that decisions made
				// while it is under way see the load.
				size := max(w.in.SizeToBeReceived, 0)
				ch.Path.addActive(1)
				ch.Path.addPending(size)
				return grant{dial: true, key: w.key, path: ch.Path, choice: ch, size: size}, true
			}
			// At a limit: a later choice may still reuse something.
		}
	}
	return grant{}, false
}

// dialKey names the dials in progress to one destination over one path.
type dialKey struct {
	key  string
	path *Path
}

// dialDone ends the count of a dial in progress, under c.mu.
func (c *core) dialDone(key string, p *Path) {
	if k := (dialKey{key, p}); c.dialing[k] > 1 {
		c.dialing[k]--
	} else {
		delete(c.dialing, k)
	}
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

// unusedPath reports whether the destination has no connection, open or
// being opened, on p.
func (c *core) unusedPath(key string, es []*entry, p *Path) bool {
	if c.dialing[dialKey{key, p}] > 0 {
		return false
	}
	for _, e := range es {
		if e.path == p {
			return false
		}
	}
	return true
}

// waitingAhead reports whether a waiter for w's destination is ahead of w.
func (c *core) waitingAhead(w *waiter) bool {
	for _, o := range c.waiters {
		if o == w {
			return false
		}
		if o.key == w.key {
			return true
		}
	}
	return false
}

// wantedAhead reports whether a waiter ahead of w waits for e: it gets e
// first.
func (c *core) wantedAhead(w *waiter, e *entry) bool {
	for _, o := range c.waiters {
		if o == w {
			return false
		}
		if o.wants == e {
			return true
		}
	}
	return false
}

func (c *core) byID(es []*entry, id uint64) *entry {
	for _, e := range es {
		if e.id == id {
			return e
		}
	}
	return nil
}

// freeOn finds the most recently used connection on path p with a free
// slot that no waiter ahead of w waits for, and reserves it.
func (c *core) freeOn(w *waiter, es []*entry, p *Path, now time.Time) (grant, bool) {
	var best *entry
	for _, e := range es {
		if e.path == p && e.c.available() > 0 && !c.wantedAhead(w, e) && (best == nil || e.lastUsed.After(best.lastUsed)) {
			best = e
		}
	}
	if best == nil {
		return grant{}, false
	}
	return c.reserve(w, best, now)
}

// reserve takes a slot on e for a grant, under c.mu.
func (c *core) reserve(w *waiter, e *entry, now time.Time) (grant, bool) {
	wasIdle := e.c.inFlight() == 0
	if e.removed || !e.c.reserve() {
		return grant{}, false
	}
	size := max(w.in.SizeToBeReceived, 0)
	e.addPending(size)
	e.idleSince = time.Time{}
	c.setActive(e, true)
	c.stat(e.path).Reuses++
	g := grant{e: e, wasIdle: wasIdle, size: size}
	if wasIdle {
		g.idle = now.Sub(e.lastUsed)
	}
	e.lastUsed = now
	return g, true
}

func (c *core) roomFor(key string) bool {
	return c.underHostLimit(key) && (c.maxTotal <= 0 || c.total < c.maxTotal)
}

// underHostLimit reports whether key may have one more connection by the
// per-destination limit.
func (c *core) underHostLimit(key string) bool {
	return c.maxPerHost <= 0 || len(c.entries[key])+c.dialingTo(key) < c.maxPerHost
}

// closeIdleOf closes the longest idle connection among es that is not on
// path p; false if there is none. The policy wants a new connection on p,
// and an idle one elsewhere would hold one of the host's slots: a page
// whose requests the policy sends over p would load with one parallel
// connection fewer there (BENCHMARKS.md, "What was found on the way", 3).
func (c *core) closeIdleOf(es []*entry, p *Path) bool {
	var oldest *entry
	for _, e := range es {
		if e.path != p && e.c.inFlight() == 0 && (oldest == nil || e.lastUsed.Before(oldest.lastUsed)) {
			oldest = e
		}
	}
	if oldest == nil {
		return false
	}
	c.remove(oldest)
	return true
}

// closeOldestIdle closes the longest idle connection to make room under the
// total limit, as browsers do; false if there is none.
func (c *core) closeOldestIdle() bool {
	var oldest *entry
	for _, es := range c.entries {
		for _, e := range es {
			if e.c.inFlight() == 0 && (oldest == nil || e.lastUsed.Before(oldest.lastUsed)) {
				oldest = e
			}
		}
	}
	if oldest == nil {
		return false
	}
	c.remove(oldest)
	return true
}

// remove takes e out of the pool and closes it, under c.mu.
func (c *core) remove(e *entry) {
	if e.removed {
		return
	}
	e.removed = true
	c.setActive(e, false)
	es := c.entries[e.key]
	if i := slices.Index(es, e); i >= 0 {
		// A new slice, not slices.Delete in place: callers iterate views of
		// the old one (a decision's candidates, a sweep) while removing.
		c.entries[e.key] = append(es[:i:i], es[i+1:]...)
		if len(c.entries[e.key]) == 0 {
			delete(c.entries, e.key)
		}
		c.total--
	}
	go e.c.close() // closing may call back into the pool (state hooks)
}

// changed is called when e's state may have changed (a request finished,
// a slot was released, the connection died). It removes dead entries,
// arms the idle timer and serves waiters. It never blocks on c.mu, since
// state hooks may run where the caller holds locks of its own.
func (c *core) changed(e *entry) {
	if c.mu.TryLock() {
		sample := c.changedLocked(e)
		c.mu.Unlock()
		if sample {
			sampleTCP(e)
		}
		return
	}
	go func() {
		c.mu.Lock()
		sample := c.changedLocked(e)
		c.mu.Unlock()
		if sample {
			sampleTCP(e)
		}
	}()
}

// changedLocked is changed under c.mu. It reports whether e just went
// idle: its TCP_INFO is then worth a sample, which the caller takes after
// unlocking (a system call has no business under the pool's lock).
func (c *core) changedLocked(e *entry) (sample bool) {
	if e.removed {
		return false
	}
	if e.c.dead() || c.closed {
		c.remove(e)
	} else if e.c.inFlight() == 0 && e.idleSince.IsZero() {
		now := time.Now()
		e.lastUsed, e.idleSince = now, now
		sample = e.path != nil
		c.setActive(e, false)
		if c.sweeper == nil && c.idleTimeout > 0 {
			c.sweeper = time.AfterFunc(c.idleTimeout, c.sweep)
		}
	}
	c.serveWaiters()
	if !e.removed && e.c.inFlight() == 0 {
		c.trimIdle(e)
	}
	return sample
}

// trimIdle keeps the idle connections within the idle limits, under c.mu,
// as net/http's tryPutIdleConn does: e, just gone idle (and not taken by a
// waiter), is closed if its destination has enough idle ones; then the
// longest idle connection anywhere while there are too many in all.
func (c *core) trimIdle(e *entry) {
	if c.idlePerHost != 0 && c.idleCount(c.entries[e.key]) > max(c.idlePerHost, 0) {
		c.remove(e)
		return
	}
	if c.idleTotal <= 0 || c.total <= c.idleTotal {
		return // no limit, or fewer connections in all than it allows idle
	}
	n := 0
	for _, es := range c.entries {
		n += c.idleCount(es)
	}
	for ; n > c.idleTotal && c.closeOldestIdle(); n-- {
	}
}

func (c *core) idleCount(es []*entry) int {
	n := 0
	for _, e := range es {
		if e.c.inFlight() == 0 && !e.removed {
			n++
		}
	}
	return n
}

// sweep closes connections idle for IdleTimeout and re-arms itself for the
// next one to expire, if any: one timer for the pool, not one per request.
func (c *core) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var next time.Time
	for _, es := range c.entries {
		for i := len(es) - 1; i >= 0; i-- {
			e := es[i]
			if e.idleSince.IsZero() || e.c.inFlight() > 0 {
				continue
			}
			if expiry := e.idleSince.Add(c.idleTimeout); !expiry.After(now) {
				c.remove(e)
			} else if next.IsZero() || expiry.Before(next) {
				next = expiry
			}
		}
	}
	if next.IsZero() || c.closed {
		c.sweeper = nil
	} else {
		c.sweeper.Reset(next.Sub(now))
	}
	c.serveWaiters()
}

// serveWaiters hands grants to waiters in FIFO order, under c.mu. A
// waiter never overtakes an earlier one for the same destination, even when
// a slot frees up (outside c.mu) while the queue is being served, except
// that one the policy had wait for a particular busy connection lets those
// behind it go their own ways (a new connection, another free one); none
// takes that connection before it.
func (c *core) serveWaiters() {
	// First the waiters whose policy wants a path their destination has no
	// connection on: a page whose requests queue at the host's limit would
	// otherwise use that path only once the requests ahead, which the
	// policy keeps on the busy path, are all under way. A connection gone
	// idle is better spent opening the unused path.
	for i := 0; i < len(c.waiters); {
		w := c.waiters[i]
		if w.wantsPath == nil || w.ctx.Err() != nil || !c.idleElsewhere(w.key, w.wantsPath) {
			i++
			continue
		}
		wants := w.wants
		g, ok := c.tryChoices(w, w.wantsPath)
		if !ok {
			// Its place in the queue stands for anything else, and so does
			// the busy connection it waits for; wantsPath is as the policy
			// now has it.
			w.wants = wants
			i++
			continue
		}
		c.waiters = slices.Delete(c.waiters, i, i+1)
		w.stopTimer()
		w.ch <- g
	}
	var blocked map[string]bool
	for i := 0; i < len(c.waiters); {
		w := c.waiters[i]
		if w.ctx.Err() != nil || blocked[w.key] {
			i++ // a cancelled waiter's own goroutine removes it
			continue
		}
		if w.decided && !c.roomFor(w.key) && !c.anyFree(w.key) && !c.roomByClosingIdle(w.key) {
			// Nothing to be had: no room for a new connection, no free
			// one, and no idle one anywhere whose closing would make room.
			// Asking the policy again would change nothing but cost a
			// decision per waiter per change, thousands for a page; its
			// last decision stands.
			i++
			continue
		}
		g, ok := c.try(w)
		if !ok {
			if w.wants == nil {
				// Waiting for room or for any connection: nobody behind it
				// for this destination may pass.
				if blocked == nil {
					blocked = map[string]bool{}
				}
				blocked[w.key] = true
			}
			i++
			continue
		}
		c.waiters = slices.Delete(c.waiters, i, i+1)
		w.stopTimer()
		w.ch <- g
	}
}

// anyFree reports whether the destination has a connection that can take
// a request now.
func (c *core) anyFree(key string) bool {
	for _, e := range c.entries[key] {
		if e.c.available() > 0 && !e.removed {
			return true
		}
	}
	return false
}

// roomByClosingIdle reports whether closing an idle connection, to any
// destination, would make room for a new one to key: the destination is
// under its own limit and only the total limit stands in the way (what
// tryChoices does with closeOldestIdle).
func (c *core) roomByClosingIdle(key string) bool {
	if !c.underHostLimit(key) {
		return false
	}
	for _, es := range c.entries {
		for _, e := range es {
			if e.c.inFlight() == 0 && !e.removed {
				return true
			}
		}
	}
	return false
}

// idleElsewhere reports whether the destination has an idle connection on
// a path other than p.
func (c *core) idleElsewhere(key string, p *Path) bool {
	for _, e := range c.entries[key] {
		if e.path != p && e.c.inFlight() == 0 && !e.removed {
			return true
		}
	}
	return false
}

// pathErr explains err by the path going down, if it did.
func (e *entry) pathErr(err error) error {
	if err != nil && err != io.EOF && e.pathDown.Load() {
		return &PathDownError{Path: pathName(e.path), Err: err}
	}
	return err
}

// drainGonePaths closes the connections on paths that are gone, down or
// without the connection's address, busy ones too: their requests could
// only hang. Those requests fail with a PathDownError.
func (c *core) drainGonePaths() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeWhere(func(e *entry) bool {
		if e.path == nil {
			return false
		}
		p := c.m.Path(e.path.Name)
		gone := p == nil || !p.Up || !hasLocalAddr(p, e.raw)
		if gone {
			e.pathDown.Store(true)
		}
		return gone
	})
	c.serveWaiters()
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

func idle(e *entry) bool { return e.c.inFlight() == 0 }

func (c *core) pathStats() map[string]PathStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]PathStats, len(c.stats))
	for name, s := range c.stats {
		out[name] = PathStats{Reuses: s.Reuses, Dials: s.Dials}
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
	defer c.mu.Unlock()
	c.removeWhere(idle)
	c.serveWaiters()
}

// close closes the idle connections (busy ones when they are released)
// and fails the waiters.
func (c *core) close() {
	c.mu.Lock()
	c.closed = true
	if c.ticker != nil {
		c.ticker.Stop()
		c.ticker = nil
	}
	if c.sweeper != nil {
		c.sweeper.Stop()
		c.sweeper = nil
	}
	c.removeWhere(idle)
	for _, w := range c.waiters {
		w.stopTimer()
		w.ch <- grant{err: ErrPoolClosed}
	}
	c.waiters = nil
	c.mu.Unlock()
	c.unsubscribe()
}

// unsubscribe ends the subscription to the Manager's path changes, once.
func (c *core) unsubscribe() {
	c.unsubOnce.Do(func() {
		if c.unsub != nil {
			c.unsub()
		}
	})
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
			l.idleTimeout = DefaultIdleTimeout
		}
		p.core = newCore(p.Manager, l)
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
	d := p.Dialer
	if d == nil {
		d = &Dialer{}
	}
	key := network + " " + net.JoinHostPort(host, strconv.Itoa(int(port)))
	a, err := p.core.acquire(ctx, key, dest, &in, func(ctx context.Context, ch Choice) (pooled, net.Conn, error) {
		nc, err := d.dialChoice(ctx, p.core.m, network, host, port, ch, in.Multipath)
		if err != nil {
			return nil, nil, err
		}
		return &rawConn{nc: nc}, nc, nil
	})
	if err != nil {
		var oe *net.OpError
		if !errors.As(err, &oe) && !errors.Is(err, ErrPoolClosed) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			err = &net.OpError{Op: "dial", Net: network, Err: err}
		}
		return nil, false, err
	}
	return &PooledConn{Conn: a.e.raw, core: p.core, e: a.e}, a.reused, nil
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
// Gets fail with ErrPoolClosed. Connections handed out stay usable until
// released or closed.
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

func (r *rawConn) reserve() bool   { return !r.closed.Load() && r.inUse.CompareAndSwap(false, true) }
func (r *rawConn) unreserve()      { r.inUse.Store(false) }
func (r *rawConn) dead() bool      { return r.closed.Load() }
func (r *rawConn) close()          { r.closed.Store(true); r.nc.Close() }
func (r *rawConn) ownReader() bool { return false }

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
	c.e.addPending(-c.e.pending.Load()) // whatever did not come will not
	c.core.mu.Lock()
	c.e.c.(*rawConn).inUse.Store(false)
	sample := c.core.changedLocked(c.e)
	c.core.mu.Unlock()
	if sample {
		sampleTCP(c.e)
	}
}

// Close closes the connection and removes it from the pool.
func (c *PooledConn) Close() error {
	if c.done.Swap(true) {
		return nil
	}
	c.e.addPending(-c.e.pending.Load())
	rc := c.e.c.(*rawConn)
	rc.closed.Store(true)
	err := rc.nc.Close()
	c.core.changed(c.e)
	return err
}

// hasLocalAddr reports whether p still has c's local address: a connection
// from an address that is gone is dead.
func hasLocalAddr(p *Path, c net.Conn) bool {
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	return err != nil || slices.Contains(p.Addrs, ap.Addr().Unmap())
}

// setActive counts e as active (requests in flight) on its path or not, and
// keeps the sampling tick running while anything is active. Under c.mu.
func (c *core) setActive(e *entry, active bool) {
	if e.active == active {
		return
	}
	e.active = active
	if e.path == nil {
		return // routed by the OS: no path to estimate, nothing to sample
	}
	if active {
		e.path.addActive(1)
		e.tickBytes = e.bytesIn.Load()
		if c.ticker == nil {
			c.lastTick = time.Now()
			c.ticker = time.AfterFunc(sampleInterval, c.tick)
		}
	} else {
		e.path.addActive(-1)
	}
}

// sampleInterval is how often active connections are sampled, as the
// Socket Intents prototype did.
const sampleInterval = 100 * time.Millisecond

// tick samples the active connections: TCP_INFO of each, and the bytes
// each path delivered since the last tick (its delivery rate, all of the
// path's connections together). It stops when nothing is active. The
// system calls (TCP_INFO, the interfaces' counters in sysfs) run outside
// c.mu: under it only the bookkeeping, before and after.
func (c *core) tick() {
	c.mu.Lock()
	now := time.Now()
	elapsed := now.Sub(c.lastTick)
	c.lastTick = now
	delivered := map[*Path]int64{}
	var active []*entry
	for _, es := range c.entries {
		for _, e := range es {
			if !e.active {
				continue
			}
			active = append(active, e)
			in := e.bytesIn.Load()
			delivered[e.path] += in - e.tickBytes
			e.tickBytes = in
		}
	}
	if len(active) == 0 || c.closed || c.ticker == nil { // nil: called other than by the timer
		c.ticker = nil
	} else {
		c.ticker.Reset(sampleInterval)
	}
	c.mu.Unlock()

	for _, e := range active {
		sampleTCP(e)
	}
	rx := map[*Path]int64{}
	for p := range delivered {
		if p == nil {
			continue // routed by the OS: no path to estimate
		}
		if n, ok := ifaceRxBytes(p.Name); ok {
			rx[p] = n
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.windows == nil {
		c.windows = map[string]*deliveryWindow{}
	}
	activePaths := map[string]bool{}
	for p := range delivered {
		activePaths[pathName(p)] = true
	}
	for name := range c.windows {
		if !activePaths[name] {
			delete(c.windows, name) // idle: a gap must not dilute the next rate
		}
	}
	for p, n := range delivered {
		if p == nil {
			continue
		}
		w := c.windows[pathName(p)]
		if w == nil {
			w = &deliveryWindow{}
			c.windows[pathName(p)] = w
		}
		cur, rxOK := rx[p]
		var rxDelta int64
		if rxOK && w.rxValid {
			rxDelta = cur - w.lastRx
		}
		w.lastRx, w.rxValid = cur, rxOK
		if bytes, d, ok := w.add(n, rxDelta, elapsed); ok {
			p.sampleDelivery(bytes, d)
		}
	}
}

// sampleTCP feeds e's TCP_INFO (RTT, loss) to its path's estimates. It
// makes a system call: never under core.mu.
func sampleTCP(e *entry) {
	if e.path == nil || e.raw == nil {
		return
	}
	sc, ok := e.raw.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	info, err := tcpinfo.Get(rc)
	if err != nil {
		return
	}
	e.path.sampleRTT(info.RTT)
	e.sampleMu.Lock()
	defer e.sampleMu.Unlock()
	if e.path.est != nil && info.DataSegsOut >= e.lastSegs && info.Retrans >= e.lastRetrans {
		e.path.est.AddLoss(info.Retrans-e.lastRetrans, info.DataSegsOut-e.lastSegs)
	}
	e.lastRetrans, e.lastSegs = info.Retrans, info.DataSegsOut
}

// deliveryWindow sums a path's delivered bytes over its last few ticks.
// Single ticks are too short: when loss recovery fills a hole, a burst of
// buffered data becomes readable at once, and 100 ms after a quiet 100 ms
// shows twice the link's rate.
//
// A window counts the larger of what this library read on the path and
// what the interface received (its counters also see other programs'
// traffic, and headers), so the path's capacity shows even when this
// library is not the only one using it. The two are summed apart: data
// that arrived out of order is received in one tick and read in a later
// one.
type deliveryWindow struct {
	bytes   [deliveryTicks]int64
	rx      [deliveryTicks]int64
	durs    [deliveryTicks]time.Duration
	n, i    int
	lastRx  int64
	rxValid bool
}

const deliveryTicks = 10 // 1 s: many round trips of most paths

func (w *deliveryWindow) add(bytes, rx int64, d time.Duration) (int64, time.Duration, bool) {
	w.bytes[w.i], w.rx[w.i], w.durs[w.i] = bytes, rx, d
	w.i = (w.i + 1) % deliveryTicks
	w.n = min(w.n+1, deliveryTicks)
	if w.n < deliveryTicks {
		return 0, 0, false
	}
	var sb, srx int64
	var sd time.Duration
	for k := range deliveryTicks {
		sb += w.bytes[k]
		srx += w.rx[k]
		sd += w.durs[k]
	}
	return max(sb, srx), sd, true
}

// addPending changes the bytes e (and so its path) still expects.
func (e *entry) addPending(delta int64) {
	e.pending.Add(delta)
	e.path.addPending(delta)
}
