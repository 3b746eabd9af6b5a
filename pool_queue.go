package intents

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// scheduler hands a pool's connections to the requests that ask for
// them, as their policy decides: a request that can be served at once is;
// the others wait in the queue, in order, and are decided again, in
// passes, whenever the pool changes (serve). How one decision becomes a
// grant is in pool_choose.go. Guarded by the pool's lock, which it drops
// while the policy decides.
type scheduler struct {
	pool  *core
	queue waitQueue
	// serving is set while a goroutine hands grants to the queue (serve);
	// again asks it for another pass, for changes made meanwhile.
	serving, again bool
	// originSize and originSettled are the pool's (see coreConfig).
	originSize    func(origin string) (int64, sizeSource)
	originSettled func(origin string) bool
	// loops guesses the backlog of callers that hold their requests back
	// (see closedLoops); its own lock, taken under the pool's or alone.
	loops closedLoops

	testHookQueued func() // called under the pool's lock when a request joins the queue
}

// waiter is one request asking the pool for a connection, as net/http's
// wantConn: it gets exactly one grant, or its context ends first.
type waiter struct {
	connRequest // its in changes as the origin's size is learnt (see scheduler.decideOnceUnlocking)
	ctx         context.Context
	skip        []*Path    // the paths its dials failed on
	ch          chan grant // queued waiters only; buffered 1: a grant is handed over without blocking

	// The rest is guarded by core.mu.
	queued  bool // it joined the queue
	inQueue bool // and is still in it
	// wants is the busy connection the policy chose to wait for, if it
	// did: later waiters may go their own ways meanwhile, but see it
	// waiting there (Candidate.Waiting).
	wants *entry
	// timer ends a wait for a busy connection while there is room for a
	// new one; waitedOut says it did: w waits for no busy connection
	// again while a new one could be had.
	timer     *time.Timer
	waitedOut bool
	// wantsPath is the path its policy last wanted a new connection on
	// when the destination had none there and no room: it is served before
	// the queue when a connection goes idle (see scheduler.servePass).
	wantsPath *Path
	decided   bool    // the policy was asked at least once
	permitted []*Path // by its last decision
	// heldSince is when a new connection was first held back for w until
	// its origin's sizes are known (see scheduler.holdsForSizes); holdTimer ends
	// the hold.
	heldSince time.Time
	holdTimer *time.Timer
}

// stopTimer stops w's timers, if armed. Under core.mu.
func (w *waiter) stopTimer() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if w.holdTimer != nil {
		w.holdTimer.Stop()
		w.holdTimer = nil
	}
}

// waitQueue is the FIFO of waiting requests, as net/http's wantConnQueue.
// Guarded by core.mu.
type waitQueue struct {
	ws []*waiter
	n  atomic.Int32 // len(ws), read without the lock (scheduler.waiting)
}

func (q *waitQueue) push(w *waiter) {
	w.queued, w.inQueue = true, true
	q.ws = append(q.ws, w)
	q.n.Store(int32(len(q.ws)))
}

// waiting reports whether any request waits, without the pool's lock: a
// hint, for whether telling the pool of a change is worth its lock.
func (s *scheduler) waiting() bool { return s.queue.n.Load() > 0 }

// remove takes w out of the queue; false if it was not in it (it was
// handed a grant, or failed).
func (q *waitQueue) remove(w *waiter) bool {
	if !w.inQueue {
		return false
	}
	w.inQueue = false
	w.stopTimer()
	if i := slices.Index(q.ws, w); i >= 0 {
		q.ws = slices.Delete(q.ws, i, i+1)
	}
	q.n.Store(int32(len(q.ws)))
	return true
}

// deliver hands g to w, which leaves the queue.
func (q *waitQueue) deliver(w *waiter, g grant) {
	q.remove(w)
	w.ch <- g
}

// failAll hands err to every waiter.
func (q *waitQueue) failAll(err error) {
	for _, w := range q.ws {
		w.inQueue = false
		w.stopTimer()
		w.ch <- grant{err: err}
	}
	q.ws = nil
	q.n.Store(0)
}

// has reports whether a request for key waits.
func (q *waitQueue) has(key string) bool {
	for _, w := range q.ws {
		if w.key == key {
			return true
		}
	}
	return false
}

// aheadOf reports whether a waiter for w's destination is ahead of w (for
// a w not in the queue: whether any waits for its destination).
func (q *waitQueue) aheadOf(w *waiter) bool {
	return q.anyAhead(w, func(*waiter) bool { return true })
}

// undecidedAhead reports whether a waiter for w's destination is ahead of
// w that has not chosen to wait for a busy connection (see
// replaceIdleFor).
func (q *waitQueue) undecidedAhead(w *waiter) bool {
	return q.anyAhead(w, func(o *waiter) bool { return o.wants == nil })
}

// wantedAhead reports whether a waiter ahead of w waits for e, one of w's
// destination's connections: it gets e first.
func (q *waitQueue) wantedAhead(w *waiter, e *entry) bool {
	return q.anyAhead(w, func(o *waiter) bool { return o.wants == e })
}

// anyAhead reports whether a waiter for w's destination ahead of w (all of
// them, for a w not in the queue) is one that match says.
func (q *waitQueue) anyAhead(w *waiter, match func(o *waiter) bool) bool {
	for _, o := range q.ws {
		if o == w {
			return false
		}
		if o.key == w.key && match(o) {
			return true
		}
	}
	return false
}

// waitingFor counts the other waiters that wait for e (HTTP/1.1: one
// request at a time) and the bytes they expect.
func (q *waitQueue) waitingFor(e *entry, w *waiter) (n int, bytes int64) {
	for _, o := range q.ws {
		if o.wants == e && o != w {
			n++
			bytes += max(o.in.SizeToBeReceived, 0)
		}
	}
	return n, bytes
}

// bytesFor is what the waiters for key other than skip expect to receive,
// by their size hints: load still to come, which the policy may weigh (see
// Request.Queued). originTypical, if positive, stands for those whose size
// is their origin's median (waiter.sizeOrigin); each counts at least floor.
func (q *waitQueue) bytesFor(key string, skip *waiter, originTypical, floor int64) int64 {
	var n int64
	for _, o := range q.ws {
		if o != skip && o.key == key {
			size := o.in.SizeToBeReceived
			if o.sizeOrigin != "" && originTypical > 0 {
				size = originTypical
			}
			n += max(size, floor)
		}
	}
	return n
}

// maxWaitForBusy bounds how long a request waits for busy connections
// while it could open a new one.
var maxWaitForBusy = time.Second

// waitAtMost arms w's timer: after maxWaitForBusy, w stops waiting for
// busy connections and takes its policy's first choice that is not one.
// The bound is on the wait, not on one connection: the policy may turn
// from one busy connection to another, and a connection whose body its
// caller holds unread looks as near its end as any (all its bytes have
// arrived), so a bound per connection would add a second for each one
// held. Under s.pool.mu.
func (s *scheduler) waitAtMost(w *waiter) {
	s.decideAgainAfter(w, &w.timer, maxWaitForBusy, func() bool {
		if w.wants == nil { // it waits for room now, not for a connection
			return false
		}
		w.waitedOut = true
		return true
	})
}

// decideAgainAfter arms *slot, one of w's timers: after d, unless stopped
// meanwhile (stopTimer) or w left the queue, it clears *slot and, if
// fired (under s.pool.mu) says so, has the queue decided again, w's last
// decision no longer standing. Under s.pool.mu.
func (s *scheduler) decideAgainAfter(w *waiter, slot **time.Timer, d time.Duration, fired func() bool) {
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.pool.mu.Lock()
		if *slot != t || !w.inQueue { // stopped meanwhile
			s.pool.mu.Unlock()
			return
		}
		*slot = nil // a later wait arms its own
		if !fired() {
			s.pool.mu.Unlock()
			return
		}
		s.again = true // its last decision no longer stands
		s.pool.mu.Unlock()
		s.serve()
	})
	*slot = t
}

// waiterPool keeps the waiters of requests served at once: most are.
var waiterPool = sync.Pool{New: func() any { return new(waiter) }}

// wait asks for a grant, queueing FIFO behind earlier requests until one
// is possible or ctx ends.
func (s *scheduler) wait(ctx context.Context, r connRequest, skip []*Path) (grant, error) {
	if skip == nil && s.tracksLoops() { // a request's first ask, not its retry
		s.loops.arrived(r.key, time.Now())
	}
	w := waiterPool.Get().(*waiter)
	*w = waiter{connRequest: r, ctx: ctx, skip: skip}
	s.pool.mu.Lock()
	if !s.pool.closed && !s.queue.has(r.key) { // nobody is ahead for this destination
		if g, ok := s.attempt(w, nil); ok {
			s.pool.mu.Unlock()
			// Never queued, so nothing else refers to it (no timer, no
			// channel): the next request may use it.
			*w = waiter{}
			waiterPool.Put(w)
			return g, g.err
		}
	}
	if s.pool.closed {
		s.pool.mu.Unlock()
		return grant{}, errPoolClosed
	}
	w.ch = make(chan grant, 1)
	s.queue.push(w)
	s.pool.mu.Unlock()
	s.serve() // earlier waiters that can go now go first; this one too, if it can
	if s.testHookQueued != nil {
		s.pool.mu.Lock()
		if w.inQueue {
			s.testHookQueued()
		}
		s.pool.mu.Unlock()
	}
	select {
	case g := <-w.ch:
		return g, g.err
	case <-ctx.Done():
		s.pool.mu.Lock()
		left := s.queue.remove(w)
		s.pool.mu.Unlock()
		if !left {
			// A grant was handed over as ctx ended: give it back.
			s.pool.undo(<-w.ch)
		}
		return grant{}, ctx.Err()
	}
}

// serve hands grants to the waiters, in passes over the queue, until a
// pass ends with nothing changed meanwhile. One goroutine serves at a
// time: another that calls serve while it does asks it for one more pass
// instead, so no change goes unseen, and the policy runs outside s.pool.mu.
func (s *scheduler) serve() {
	s.pool.mu.Lock()
	s.serveLocked()
	s.pool.mu.Unlock()
}

// serveLocked is serve for a caller that holds s.pool.mu (dropped and taken
// again while policies decide).
func (s *scheduler) serveLocked() {
	if s.serving {
		s.again = true
		return
	}
	s.serving = true
	for len(s.queue.ws) > 0 && !s.pool.closed {
		s.again = false
		s.servePass()
		if !s.again {
			break
		}
	}
	s.pool.idle.trimWentIdle()
	s.serving = false
}

// servePass hands grants to waiters in FIFO order, under s.pool.mu (dropped
// while a policy decides). A waiter never overtakes an earlier one for the
// same destination, except that one the policy had wait for a particular
// busy connection lets those behind it go their own ways (a new
// connection, another free one); none takes that connection before it.
func (s *scheduler) servePass() {
	ws := slices.Clone(s.queue.ws) // the queue changes while a policy decides
	// First the waiters whose policy wants a path their destination has no
	// connection on: a page whose requests queue at the host's limit would
	// otherwise use that path only once the requests ahead, which the
	// policy keeps on the busy path, are all under way. A connection gone
	// idle is better spent opening the unused path.
	for _, w := range ws {
		if !w.inQueue || w.wantsPath == nil || w.ctx.Err() != nil || !s.pool.reg.idleElsewhere(w.key, w.wantsPath) {
			continue
		}
		wants := w.wants
		if g, ok := s.attempt(w, w.wantsPath); ok {
			s.queue.deliver(w, g)
		} else if w.inQueue {
			// Its place in the queue stands for anything else, and so does
			// the busy connection it waits for; wantsPath is as the policy
			// now has it.
			w.wants = wants
		}
	}
	var blocked map[string]bool
	for _, w := range ws {
		if s.pool.closed {
			return
		}
		if !w.inQueue || w.ctx.Err() != nil || blocked[w.key] {
			continue // a cancelled waiter's own goroutine removes it
		}
		if w.decided && !s.pool.reg.roomFor(w.key) && !s.pool.reg.anyFree(w.key) && !s.pool.idle.roomByClosing(w.key) {
			// Nothing to be had: no room for a new connection, no free
			// one, and no idle one anywhere whose closing would make room.
			// Asking the policy again would change nothing but cost a
			// decision per waiter per change, thousands for a page; its
			// last decision stands.
			continue
		}
		g, ok := s.attempt(w, nil)
		if ok {
			s.queue.deliver(w, g)
			continue
		}
		if w.inQueue && w.wants == nil {
			// Waiting for room or for any connection: nobody behind it
			// for this destination may pass.
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[w.key] = true
		}
	}
}
