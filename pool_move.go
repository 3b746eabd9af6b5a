package intents

import "time"

// candidatesOf is the pool's connections to key as a policy sees them,
// and what the requests waiting for key expect to receive (Request.Queued;
// a byte at least for each).
func (c *core) candidatesOf(key string) ([]Candidate, int64) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.reg.entries[key]
	cands := make([]Candidate, 0, len(es))
	for _, e := range es {
		if e.migrating {
			continue
		}
		cand := e.candidate(now)
		cand.Waiting, cand.WaitingBytes = c.sched.queue.waitingFor(e, nil)
		cands = append(cands, cand)
	}
	var typical int64
	if c.sched.originSize != nil {
		typical, _ = c.sched.originSize(key) // a moving request's key is its origin's: never through a proxy
	}
	return cands, c.sched.queue.bytesFor(key, nil, typical, 1)
}

// moveOnto takes e out of the pool, closing it, if its destination has a
// connection on p that can take the request moving from it now: a new
// connection would only add a set-up. False, e left as it is, if none has
// (or e is gone already, or the pool is closed).
func (c *core) moveOnto(e *entry, p *Path) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || e.removed || !c.reg.hasFreeOn(e.key, p) {
		return false
	}
	c.remove(e)
	return true
}

// connectionFor reports whether a request to key could have a connection
// on p at once: a free one there, room under the limits, or an idle one of
// key's on another path that a new one there replaces (see
// replaceIdleFor). A split's part that waited in the queue would come too
// late to be of use.
func (c *core) connectionFor(key string, p *Path) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if c.reg.hasFreeOn(key, p) || c.reg.roomFor(key) {
		return true
	}
	for _, e := range c.reg.entries[key] {
		if e.path != p && !e.migrating && e.c.inFlight() == 0 {
			return true
		}
	}
	return false
}

// moveSlot takes e out of the pool, closing it, and gives the place it
// held in the limits to a new connection on p for the request that moves
// from it: the queue cannot take that place in between. False if e is
// gone already or the pool is closed.
func (c *core) moveSlot(e *entry, dest Destination, p *Path, permitted []*Path, size int64) (dialSlot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || e.removed {
		return dialSlot{}, false
	}
	c.remove(e)
	return c.reg.takeDialSlot(e.key, dest, permitted, Choice{Path: p, Fresh: true}, size), true
}
