package intents

import (
	"cmp"
	"sync"
	"time"
)

// A caller that keeps a fixed number of requests in flight for a
// destination and holds the rest back (a browser's six connections to a
// proxy, a worker pool) sends its next request as soon as a response
// ends. The pool's queue then stays empty, and a policy that weighs the
// load still to come (Request.Queued) sees none, though the caller has a
// page's worth behind: each request alone arrives earliest on the fast
// path, and the page as a whole waits for it. closedLoops notices such a
// caller by its refills, requests that come right after a response for
// the same destination ended, and guesses its backlog from the requests
// it has sent.
//
// The guess is one: it stands on how many refills came in a row, no
// more, and is used only where the pool's own queue is empty.
type closedLoops struct {
	mu     sync.Mutex
	dests  map[string]*loopState
	window time.Duration // refillWithin unless set (tests)
}

// loopState is what closedLoops keeps of one destination.
type loopState struct {
	ends    []time.Time // responses ended and not refilled yet, oldest first
	refills int         // requests in a row that refilled an ended response
	sent    int         // requests since the caller last paused
	seen    time.Time   // its last response end or request
}

const (
	// refillWithin is how soon after a response ends a request counts as
	// its refill: a caller on the same host answers within a millisecond
	// or two, and a longer window would take an open-loop caller's next
	// page for a refill.
	refillWithin = 10 * time.Millisecond
	// minRefills is how many refills in a row make a closed loop: one may
	// be the first of a page's requests after its root.
	minRefills = 2
	// maxLoopEnds bounds the ends kept per destination: more responses
	// than that ending within refillWithin would not be refilled by a
	// caller with so few in flight anyway.
	maxLoopEnds = 16
	// maxLoopDests bounds the destinations kept; one not heard from for
	// loopForget makes room.
	maxLoopDests = 256
	// maxRoundsGuessed bounds the guess, in rounds of the requests the
	// caller keeps in flight.
	maxRoundsGuessed = 4
	loopForget       = 10 * time.Second
)

// tracksLoops reports whether s's pool keeps closed loops' state: only a
// policy reads Request.Queued, so without one the bookkeeping would be a
// lock taken twice a request for nothing.
func (s *scheduler) tracksLoops() bool {
	return s.pool.m != nil && s.pool.m.cfg.Policy != nil
}

// ended notes that a response for key ended at now.
func (l *closedLoops) ended(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state(key, now)
	if st == nil {
		return
	}
	if len(st.ends) == maxLoopEnds {
		st.ends = append(st.ends[:0], st.ends[1:]...)
	}
	st.ends = append(st.ends, now)
	st.seen = now
}

// arrived notes a request for key at now: a refill if a response ended
// within refillWithin before it and was not refilled yet; otherwise the
// run of refills is broken (a burst of requests, or a pause). A request
// that comes after refillWithin of nothing, no request and no response
// ending, starts the caller's count of requests sent afresh.
func (l *closedLoops) arrived(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state(key, now)
	if st == nil {
		return
	}
	window := cmp.Or(l.window, refillWithin)
	if now.Sub(st.seen) > window {
		st.sent = 0
	}
	st.seen = now
	st.sent++
	k := 0
	for k < len(st.ends) && now.Sub(st.ends[k]) > window {
		k++
	}
	st.ends = append(st.ends[:0], st.ends[k:]...)
	if len(st.ends) == 0 {
		st.refills = 0
		return
	}
	st.ends = append(st.ends[:0], st.ends[1:]...)
	st.refills++
}

// backlog guesses the bytes a closed-loop caller holds back for key, or
// 0 where it is not one (fewer than minRefills refills in a row): as many
// requests of size bytes as it sent since it last paused (a caller is
// likely about as far from its end as from its start), up to
// maxRoundsGuessed rounds of its other requests in flight. A caller with
// nothing else in flight gains nothing from another path: its requests
// go one at a time.
func (l *closedLoops) backlog(key string, inFlight int, size int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.dests[key]
	if st == nil || st.refills < minRefills || size <= 0 {
		return 0
	}
	return int64(min(st.sent, maxRoundsGuessed*inFlight)) * size
}

// state returns key's state, made if new; nil when maxLoopDests others
// were heard from within loopForget. Under l.mu.
func (l *closedLoops) state(key string, now time.Time) *loopState {
	if st := l.dests[key]; st != nil {
		return st
	}
	if l.dests == nil {
		l.dests = make(map[string]*loopState)
	}
	if len(l.dests) >= maxLoopDests {
		for k, st := range l.dests {
			if now.Sub(st.seen) > loopForget {
				delete(l.dests, k)
			}
		}
		if len(l.dests) >= maxLoopDests {
			return nil
		}
	}
	st := &loopState{seen: now}
	l.dests[key] = st
	return st
}
