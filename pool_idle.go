package intents

import "time"

// idleConns keeps a pool's idle connections within its idle limits: the
// sweep that closes them after the idle timeout, the limits per
// destination and in all, and closing one to make room for a new
// connection. It finds them in the registry and closes them with the
// pool's remove. Guarded by its core's mu, but for sweep, the timer's
// function, which takes it.
type idleConns struct {
	r       *registry
	remove  func(*entry) // the pool's: closes a connection and forgets it
	perHost int          // idle connections kept per destination (negative: none; 0: no limit)
	total   int          // idle connections kept in all (0: no limit)
	timeout time.Duration
	// sweep runs when the sweeper fires: it takes the pool's lock, calls
	// expire, and serves the waiters.
	sweep   func()
	sweeper *time.Timer // armed while there are idle connections
	// wentIdle are the connections gone idle since the last serve: kept
	// within the limits once the waiters had their chance at them.
	wentIdle []*entry
}

func idle(e *entry) bool { return e.c.inFlight() == 0 }

// add notes e, just gone idle, for the next trim and the sweep.
func (ic *idleConns) add(e *entry) {
	if ic.sweeper == nil && ic.timeout > 0 {
		ic.sweeper = time.AfterFunc(ic.timeout, ic.sweep)
	}
	ic.wentIdle = append(ic.wentIdle, e)
}

// expire closes the connections idle for the timeout and re-arms the
// sweeper for the next one to expire, if any (and stop is not set): one
// timer for the pool, not one per request.
func (ic *idleConns) expire(now time.Time, stop bool) {
	var next time.Time
	for _, es := range ic.r.entries {
		for i := len(es) - 1; i >= 0; i-- {
			e := es[i]
			if e.idleSince.IsZero() || e.c.inFlight() > 0 {
				continue
			}
			if expiry := e.idleSince.Add(ic.timeout); !expiry.After(now) {
				ic.remove(e)
			} else if next.IsZero() || expiry.Before(next) {
				next = expiry
			}
		}
	}
	if next.IsZero() || stop {
		ic.sweeper = nil
	} else {
		ic.sweeper.Reset(next.Sub(now))
	}
}

// stop stops the sweeper.
func (ic *idleConns) stop() {
	if ic.sweeper != nil {
		ic.sweeper.Stop()
		ic.sweeper = nil
	}
}

// trimWentIdle applies the idle limits to the connections gone idle since
// the last serve that no waiter took.
func (ic *idleConns) trimWentIdle() {
	for _, e := range ic.wentIdle {
		if !e.removed && !e.idleSince.IsZero() { // not taken since
			ic.trim(e)
		}
	}
	clear(ic.wentIdle)
	ic.wentIdle = ic.wentIdle[:0]
}

// trim keeps the idle connections within the idle limits, as net/http's
// tryPutIdleConn does: e, just gone idle (and not taken by a waiter), is
// closed if its destination has enough idle ones; then the longest idle
// connection anywhere while there are too many in all.
func (ic *idleConns) trim(e *entry) {
	if ic.perHost != 0 && idleCount(ic.r.entries[e.key]) > max(ic.perHost, 0) {
		ic.remove(e)
		return
	}
	if ic.total <= 0 || ic.r.total <= ic.total {
		return // no limit, or fewer connections in all than it allows idle
	}
	n := 0
	for _, es := range ic.r.entries {
		n += idleCount(es)
	}
	for ; n > ic.total && ic.closeOldest(); n-- {
	}
}

// idleCount counts the idle connections among es, by their bookkeeping
// (idleSince, set when one goes idle and cleared when it is taken): no
// call into each connection.
func idleCount(es []*entry) int {
	n := 0
	for _, e := range es {
		if !e.idleSince.IsZero() && !e.removed {
			n++
		}
	}
	return n
}

// closeOf closes the longest idle connection of key's that is not on path
// p and is on a path holding at least atLeast of key's connections (open
// or being opened; see scheduler.replaceIdleFor). The policy wants a new
// connection on p, and an idle one elsewhere would hold one of the host's
// slots: a page whose requests the policy sends over p would load with
// one parallel connection fewer there. An idle connection that has
// carried no request yet (a spare the policy has not chosen) goes first,
// whatever its path holds: closing it throws away only a handshake, which
// has measured its path's RTT already, and no window. Else a spare on a
// path too slow or too far for any of a page's objects held one of its
// six slots for the whole page while the good path, holding five, wanted
// a sixth (a page of 32 × 100 kB over 50 Mbit/s at 10 ms beside 5 Mbit/s
// at 200 ms).
func (ic *idleConns) closeOf(key string, p *Path, atLeast int) {
	var oldest, unused *entry
	for _, e := range ic.r.entries[key] {
		if e.path == p || e.c.inFlight() != 0 {
			continue
		}
		if e.spare && (unused == nil || e.lastUsed.Before(unused.lastUsed)) {
			unused = e
		}
		if (oldest == nil || e.lastUsed.Before(oldest.lastUsed)) && (atLeast <= 0 || ic.r.connsOn(key, e.path) >= atLeast) {
			oldest = e
		}
	}
	if unused != nil {
		oldest = unused
	}
	if oldest != nil {
		ic.remove(oldest)
	}
}

// closeOldest closes the longest idle connection to make room under the
// total limit, as browsers do; false if there is none.
func (ic *idleConns) closeOldest() bool {
	var oldest *entry
	for _, es := range ic.r.entries {
		for _, e := range es {
			if e.c.inFlight() == 0 && (oldest == nil || e.lastUsed.Before(oldest.lastUsed)) {
				oldest = e
			}
		}
	}
	if oldest == nil {
		return false
	}
	ic.remove(oldest)
	return true
}

// roomByClosing reports whether closing an idle connection, to any
// destination, would make room for a new one to key: the destination is
// under its own limit and only the total limit stands in the way (what
// the decision step does with closeOldest).
func (ic *idleConns) roomByClosing(key string) bool {
	if !ic.r.underHostLimit(key) {
		return false
	}
	for _, es := range ic.r.entries {
		for _, e := range es {
			if e.c.inFlight() == 0 && !e.removed {
				return true
			}
		}
	}
	return false
}
