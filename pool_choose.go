package intents

import (
	"sync"
	"time"
)

// How a policy's decision becomes a grant. The policy sees a snapshot of
// the pool and decides without the pool's lock (it is user code, and a
// decision trace or a log may do I/O); its choices are then applied to the
// pool as it is by then, each checked again: a connection closed or taken
// meanwhile is passed over for the next choice, a limit reached meanwhile
// stops a new connection.

// decideScratch is the space of one decision: the candidates shown to the
// policy, its choices, and the connections whose sockets are looked at.
type decideScratch struct {
	cands   []Candidate
	choices []Choice
	peek    []*entry
}

var decideScratchPool = sync.Pool{New: func() any { return new(decideScratch) }}

// step is what applying one choice came to.
type step int

const (
	stepGranted step = iota
	stepNext         // the choice cannot be had: the next one
	stepWait         // keep waiting
	stepStale        // the decision was made on a pool that has changed since: decide again
)

// maxStaleDecisions bounds how often one attempt decides again because the
// pool changed while its policy decided; after that the request waits, and
// the next change serves it.
const maxStaleDecisions = 3

// attempt asks the policy for w and applies its choices: a grant, or false
// to keep waiting. With only set, it takes nothing but a new connection on
// only, and that only if the policy still wants it first. Called under
// s.pool.mu, which it drops while sockets are looked at and while the policy
// decides; a queued waiter that left the queue meanwhile gets nothing.
func (s *scheduler) attempt(w *waiter, only *Path) (grant, bool) {
	sc := decideScratchPool.Get().(*decideScratch)
	defer decideScratchPool.Put(sc)
	for range maxStaleDecisions {
		g, st := s.decideOnceUnlocking(w, only, sc)
		switch st {
		case stepGranted:
			g.held = !w.heldSince.IsZero()
			return g, true
		case stepStale:
			continue
		}
		return grant{}, false
	}
	return grant{}, false
}

// decideOnceUnlocking is one decision of attempt: a snapshot under
// s.pool.mu, the policy without it (see withoutLock), its choices applied
// under it again.
func (s *scheduler) decideOnceUnlocking(w *waiter, only *Path, sc *decideScratch) (grant, step) {
	s.dropDeadUnlocking(w.key, sc)
	if s.left(w) {
		return grant{}, stepWait
	}
	now := time.Now()
	cands := s.candidates(w, now, sc)
	var originTypical int64
	if w.sizeOrigin != "" && s.originSize != nil {
		if typical, source := s.originSize(w.sizeOrigin); source != "" {
			// What the responses since the request came teach.
			originTypical = typical
			w.in.SizeToBeReceived, w.sizeSource = typical, source
		}
	}
	q := query{in: &w.in, sizeSource: w.sizeSource, dest: w.dest, loopback: w.loopback, cands: cands, skip: w.skip,
		queued: s.queue.bytesFor(w.key, w, originTypical, 0)}
	if q.queued == 0 && s.tracksLoops() {
		// Nothing queued here; a caller that queues its requests itself
		// may still have a backlog.
		inFlight := 0
		for _, c := range cands {
			inFlight += c.InFlight
		}
		q.queued = s.loops.backlog(w.key, inFlight, w.in.SizeToBeReceived)
		q.guessed = q.queued > 0
	}

	var d decision
	var err error
	s.withoutLock(func() {
		d, err = s.pool.m.decide(w.ctx, q, sc.choices)
	})
	sc.choices = d.choices[:0]

	if s.left(w) {
		return grant{}, stepWait
	}
	if s.pool.closed {
		return grant{err: errPoolClosed}, stepGranted
	}
	w.wants, w.wantsPath, w.decided, w.permitted = nil, nil, true, d.permitted
	if err != nil {
		return grant{err: err}, stepGranted
	}
	return s.apply(w, only, d.choices, now)
}

// candidates snapshots the connections of w's destination for its
// policy, with the requests waiting for each, under s.pool.mu; a
// connection that cannot take a request and is dead is removed.
func (s *scheduler) candidates(w *waiter, now time.Time, sc *decideScratch) []Candidate {
	cands := sc.cands[:0]
	for _, e := range s.pool.reg.entries[w.key] {
		if e.migrating {
			continue
		}
		cand := e.candidate(now)
		// A connection with a reader of its own that can take a request
		// is alive; one that cannot may be dead, and is asked.
		if cand.Available == 0 && e.c.ownReader() && e.c.dead() {
			s.pool.remove(e)
			continue
		}
		cand.Waiting, cand.WaitingBytes = s.queue.waitingFor(e, w)
		cands = append(cands, cand)
	}
	sc.cands = cands
	return cands
}

// apply takes the first of a decision's choices that can be had for w
// (only: a new connection on that path, first, or nothing), under
// s.pool.mu.
func (s *scheduler) apply(w *waiter, only *Path, choices []Choice, now time.Time) (grant, step) {
	for i, ch := range choices {
		if only != nil && (i > 0 || ch.Wait || ch.Reuse != nil || !ch.Fresh || ch.Path != only) {
			return grant{}, stepWait
		}
		var g grant
		var st step
		switch {
		case ch.Wait:
			st = stepWait
		case ch.Reuse != nil:
			g, st = s.applyReuse(w, ch.Reuse, now)
		default:
			g, st = s.applyNew(w, ch, i == 0, now)
		}
		if st != stepNext {
			return g, st
		}
	}
	if len(choices) > 0 && only == nil {
		// The first choice was a connection on a path (not Fresh), none
		// free there, or a new one on a path that has some (which
		// applyNew made room for only where that evens the paths out),
		// and no later choice could be had: at the host's limit an idle
		// connection elsewhere makes room for it, or, with every
		// connection idle on other paths, nothing would ever free a
		// slot. Not before the later choices were tried: a policy that
		// names a path first and the others as fallbacks (RoundRobin)
		// means a free connection there rather than a closed one.
		ch := choices[0]
		if !ch.Wait && ch.Reuse == nil && (!ch.Fresh || s.pool.reg.connsOn(w.key, ch.Path) > 0) && !s.pool.reg.roomFor(w.key) {
			s.replaceIdleFor(w, ch.Path, !s.queue.aheadOf(w), true)
			if g, st := s.applyNew(w, ch, false, now); st == stepGranted {
				return g, st
			}
		}
	}
	return grant{}, stepWait
}

// left reports whether w, once queued, has left the queue (its context
// ended, or the pool closed): under s.pool.mu.
func (s *scheduler) left(w *waiter) bool { return w.queued && !w.inQueue }

// withoutLock runs f with s.pool.mu released, and takes it again: the one
// place where the scheduler lets go of the pool's lock midway, for what
// must not run under it (a policy's decision, a socket's check). Its
// callers say so in their names, and check again what may have changed.
func (s *scheduler) withoutLock(f func()) {
	s.pool.mu.Unlock()
	defer s.pool.mu.Lock()
	f()
}

// dropDeadUnlocking removes key's dead connections before a decision, so
// neither the policy nor the limits count them. A connection lent out
// whole is checked by its socket, without s.pool.mu (see withoutLock).
func (s *scheduler) dropDeadUnlocking(key string, sc *decideScratch) {
	sc.peek = sc.peek[:0]
	for _, e := range s.pool.reg.entries[key] {
		switch {
		case e.c.ownReader(): // its reader reports a close or stray bytes: see decideOnceUnlocking
		case e.c.available() == 0:
		case e.c.dead():
			s.pool.remove(e)
		case e.needsPeek():
			sc.peek = append(sc.peek, e)
		}
	}
	if len(sc.peek) == 0 {
		return
	}
	n := 0
	s.withoutLock(func() {
		for _, e := range sc.peek {
			if !e.alive() {
				sc.peek[n] = e
				n++
			}
		}
	})
	for _, e := range sc.peek[:n] {
		if e.c.inFlight() == 0 { // not taken meanwhile by a request that looked before it died
			s.pool.remove(e)
		}
	}
	clear(sc.peek)
}

// applyReuse applies a choice to reuse the connection of cand, which is
// as the policy saw it.
func (s *scheduler) applyReuse(w *waiter, cand *Candidate, now time.Time) (grant, step) {
	e := s.pool.reg.byID(w.key, cand.ID)
	if e == nil {
		return grant{}, stepNext // closed since the snapshot
	}
	if !s.queue.wantedAhead(w, e) {
		if g, ok := s.reserve(w, e, now); ok {
			return g, stepGranted
		}
	}
	// A free connection on the same path does at least as well as waiting
	// for this busy one: taken in queue order, as net/http hands out its
	// connections, so a request behind cannot take it first and leave this
	// one waiting behind a long transfer.
	if g, ok := s.freeOn(w, e.path, now); ok {
		return g, stepGranted
	}
	if w.waitedOut && s.pool.reg.roomFor(w.key) {
		return grant{}, stepNext // waited long enough for busy connections
	}
	if cand.Available > 0 {
		// The policy chose it free, and it was taken meanwhile: waiting
		// for it is not what it chose.
		return grant{}, stepStale
	}
	// The policy wants this one: wait for it, but not for ever while a new
	// connection could be had (its body may be held unread by the very
	// caller that waits).
	w.wants = e
	if s.pool.reg.roomFor(w.key) && w.timer == nil && w.inQueue {
		s.waitAtMost(w)
	}
	return grant{}, stepWait
}

// applyNew applies a choice of a new connection on ch.Path (or, unless
// ch.Fresh, a free one there). first says it is the policy's first choice.
func (s *scheduler) applyNew(w *waiter, ch Choice, first bool, now time.Time) (grant, step) {
	if !ch.Fresh {
		if g, ok := s.freeOn(w, ch.Path, now); ok {
			return g, stepGranted
		}
	}
	// Only the first in line for the destination makes room under the
	// total limit: one passing others (see servePass) would close what
	// those ahead may yet take. (At the host's limit, see replaceIdleFor.)
	firstInLine := !s.queue.aheadOf(w)
	if firstInLine && !s.pool.reg.roomFor(w.key) && s.pool.reg.underHostLimit(w.key) {
		s.pool.idle.closeOldest() // make room under the total limit, as browsers do
	}
	// The policy's first choice wants a new connection on its path: at
	// the host's limit an idle one elsewhere makes room (where that evens
	// the paths out: see replaceIdleFor), or, with every connection idle
	// on other paths, nothing would ever free a slot (a
	// choice of a connection there, not Fresh, only once the later
	// choices could not be had: see decideOnceUnlocking).
	if first && ch.Fresh && !s.pool.reg.roomFor(w.key) {
		s.replaceIdleFor(w, ch.Path, !s.queue.undecidedAhead(w), false)
	}
	if !s.pool.reg.roomFor(w.key) {
		return grant{}, stepNext // at a limit: a later choice may still reuse something
	}
	if s.holdsForSizes(w, now) {
		return grant{}, stepNext // so may this one: see holdsForSizes
	}
	size := max(w.in.SizeToBeReceived, 0)
	return grant{slot: s.pool.reg.takeDialSlot(w.key, w.dest, w.permitted, ch, size), size: size}, stepGranted
}

// sizesToHoldFor is how many responses an origin's typical size stands on
// before holdsForSizes lets a burst of its requests open all the
// connections they may: its root document's and two of the page's (the
// median of two is the lower one, see internal/sizes: still the root's, for
// a page of larger objects; one of smaller objects settles on two, see
// sizeCache's settled).
const sizesToHoldFor = 3

// holdConns is how many connections (open or being opened) a destination
// may have on its measured paths before holdsForSizes holds back its
// next: enough that the burst's first sizes come in while they carry it.
const holdConns = 3

// holdRTTs bounds a hold, in round trips of the nearest measured path: a
// new connection there has its first response's headers in two (its
// handshake, its request), and the rest is for the server's time.
const holdRTTs = 4

// holdsForSizes reports whether the new connection w's policy chose waits
// until w's size is known better, and arms the timer that ends the wait.
// A page's requests to its other hosts come in a burst once its root
// document is in, each predicted at every origin's typical size
// (sizeFromRecent), which then stands on the root's size alone, and while
// another path's first handshake is still out its RTT is not known: on
// those two guesses a policy such as EAF would open every connection the
// hosts may have on the path that looks best for the root's size. So
// while w's origin has not been heard from, the typical size is not
// settled and a permitted path's RTT is not measured, a destination with
// holdConns connections on its measured paths opens no more: w waits (for
// one of them if its policy names one, or for room) until the first
// responses' headers settle the size (learnSize decides again) or the
// other path answers, at most holdRTTs round trips of the nearest path.
// Not for the root's own origin (sizeFromOrigin), where holding costs a
// page of small objects over a near path more than it gains. Figures:
// docs/findings.md, "Holding a burst for its sizes".
func (s *scheduler) holdsForSizes(w *waiter, now time.Time) bool {
	if s.originSettled == nil || w.sizeOrigin == "" || w.sizeSource != sizeFromRecent ||
		s.originSettled(w.sizeOrigin) {
		return false
	}
	var near time.Duration
	open, unmeasured := 0, false
	for _, p := range w.permitted {
		rtt := p.Estimate().RTT
		if rtt <= 0 {
			unmeasured = true
			continue
		}
		open += s.pool.reg.connsOn(w.key, p)
		if near == 0 || rtt < near {
			near = rtt
		}
	}
	if !unmeasured || open < holdConns {
		return false
	}
	if w.heldSince.IsZero() {
		w.heldSince = now
	}
	left := holdRTTs*near - now.Sub(w.heldSince)
	if left <= 0 {
		return false
	}
	if w.inQueue && w.holdTimer == nil {
		// A waiter not queued yet is decided again as soon as it is.
		s.decideAgainAfter(w, &w.holdTimer, left, func() bool { return true })
	}
	return true
}

// replaceIdleFor is the case of a policy that prefers a new connection on
// p to what the pool has, at the host's limit: an idle connection of the
// destination on another path is closed for it, or the limit would keep p
// unused. Not for a fallback choice: that would close the very connection
// a better choice may be about to free. A waiter behind others may do it
// for a path the destination has no connection on, and is then served
// first when a connection goes idle (see servePass); for another path,
// only if passedOver: the waiters ahead of it all chose to wait for busy
// connections, so none of them takes the idle one (they were asked
// before it, see servePass). Else a page's first in line, waiting for
// the one connection on a slow path, would keep the next, whose policy
// wants a second there, from making room (see docs/findings.md).
//
// Where p has connections already, only one on a path holding at least
// two more of the destination's than p: a replacement evens the paths out
// and never tips them the other way. A policy that weighs each request on
// its own would otherwise trade connections back and forth between the
// paths as a page's requests alternate between small and large, each
// trade a handshake and a slow start on the new connection and a grown
// window thrown away with the old (see docs/findings.md).
//
// As a last resort (no choice of the decision could be had), any idle
// connection elsewhere: else, with every connection idle, nothing would
// ever free a slot.
func (s *scheduler) replaceIdleFor(w *waiter, p *Path, passedOver, lastResort bool) {
	if s.pool.reg.connsOn(w.key, p) == 0 {
		w.wantsPath = p
		s.pool.idle.closeOf(w.key, p, 0)
		return
	}
	if !passedOver {
		return
	}
	atLeast := 0
	if !lastResort {
		atLeast = s.pool.reg.connsOn(w.key, p) + 2
	}
	s.pool.idle.closeOf(w.key, p, atLeast)
}

// freeOn finds the most recently used connection of w's destination on
// path p with a free slot that no waiter ahead of w waits for, and
// reserves it.
func (s *scheduler) freeOn(w *waiter, p *Path, now time.Time) (grant, bool) {
	var best *entry
	for _, e := range s.pool.reg.entries[w.key] {
		if e.path == p && !e.migrating && e.c.available() > 0 && !s.queue.wantedAhead(w, e) && (best == nil || e.lastUsed.After(best.lastUsed)) {
			best = e
		}
	}
	if best == nil {
		return grant{}, false
	}
	return s.reserve(w, best, now)
}

// reserve takes a slot on e for a grant, under s.pool.mu.
func (s *scheduler) reserve(w *waiter, e *entry, now time.Time) (grant, bool) {
	wasIdle := !e.idleSince.IsZero() // set when it went idle, cleared here
	if e.removed {
		return grant{}, false
	}
	if !e.c.reserve() {
		if e.c.dead() {
			s.pool.remove(e) // died since it was looked at
		}
		return grant{}, false
	}
	size := max(w.in.SizeToBeReceived, 0)
	e.addPending(size)
	if e.origin.dial != nil {
		e.granted = append(e.granted, w.in)
	}
	e.idleSince = time.Time{}
	e.spare = false
	e.answered.Store(false)
	s.pool.sampler.setActive(e, true)
	s.pool.reg.stat(e.path).Reuses++
	g := grant{e: e, reused: true, wasIdle: wasIdle, size: size}
	if wasIdle {
		g.idle = now.Sub(e.lastUsed)
	}
	e.lastUsed = now
	return g, true
}
