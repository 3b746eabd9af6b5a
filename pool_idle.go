package intents

import "time"

// Idle connections: the sweep that closes them after the idle timeout,
// the idle limits, and closing one to make room for a new connection.
// All under core.mu.

func idle(e *entry) bool { return e.c.inFlight() == 0 }

// armSweeper starts the sweep timer if it is not running.
func (c *core) armSweeper() {
	if c.sweeper == nil && c.idleTimeout > 0 {
		c.sweeper = time.AfterFunc(c.idleTimeout, c.sweep)
	}
}

// sweep closes connections idle for IdleTimeout and re-arms itself for the
// next one to expire, if any: one timer for the pool, not one per request.
func (c *core) sweep() {
	c.mu.Lock()
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
	c.mu.Unlock()
	c.serve()
}

// trimWentIdle applies the idle limits to the connections gone idle since
// the last serve that no waiter took.
func (c *core) trimWentIdle() {
	for _, e := range c.wentIdle {
		if !e.removed && !e.idleSince.IsZero() { // not taken since
			c.trimIdle(e)
		}
	}
	clear(c.wentIdle)
	c.wentIdle = c.wentIdle[:0]
}

// trimIdle keeps the idle connections within the idle limits, as
// net/http's tryPutIdleConn does: e, just gone idle (and not taken by a
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

// idleCount counts the idle connections among es, by their bookkeeping
// (idleSince, set when one goes idle and cleared when it is taken): no
// call into each connection.
func (c *core) idleCount(es []*entry) int {
	n := 0
	for _, e := range es {
		if !e.idleSince.IsZero() && !e.removed {
			n++
		}
	}
	return n
}

// closeIdleOf closes the longest idle connection among es, key's, that is
// not on path p and is on a path holding at least atLeast of key's
// connections (open or being opened; see replaceIdleFor). The policy
// wants a new connection on p, and an idle one elsewhere would hold one of
// the host's slots: a page whose requests the policy sends over p would
// load with one parallel connection fewer there. An idle connection that
// has carried no request yet (a spare the policy has not chosen) goes
// first, whatever its path holds: closing it throws away only a
// handshake, which has measured its path's RTT already, and no window.
// Else a spare on a path too slow or too far for any of a page's objects
// held one of its six slots for the whole page while the good path,
// holding five, wanted a sixth (a page of 32 × 100 kB over 50 Mbit/s at
// 10 ms beside 5 Mbit/s at 200 ms).
func (c *core) closeIdleOf(key string, es []*entry, p *Path, atLeast int) {
	var oldest, unused *entry
	for _, e := range es {
		if e.path == p || e.c.inFlight() != 0 {
			continue
		}
		if e.spare && (unused == nil || e.lastUsed.Before(unused.lastUsed)) {
			unused = e
		}
		if (oldest == nil || e.lastUsed.Before(oldest.lastUsed)) && (atLeast <= 0 || c.connsOn(key, es, e.path) >= atLeast) {
			oldest = e
		}
	}
	if unused != nil {
		oldest = unused
	}
	if oldest != nil {
		c.remove(oldest)
	}
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
// applyNew does with closeOldestIdle).
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
