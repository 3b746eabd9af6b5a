package intents

import (
	"context"
	"net"
	"time"
)

// The pool's side of its path health (see pathHealth and healthPool):
// each method takes the pool's lock and makes no system call under it.

func (c *core) tcpOn(p *Path) []*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg.tcpOn(p)
}

func (c *core) busy(e *entry) (active bool, activeFor time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return e.c.inFlight() > 0 && !e.removed, c.sampler.activeFor(e)
}

func (c *core) closeDown(es []*entry) (stayed int) {
	if len(es) == 0 {
		return 0
	}
	c.mu.Lock()
	for _, e := range es {
		if c.loseLocked(e) {
			stayed++
		}
	}
	c.mu.Unlock()
	c.sched.serve()
	return stayed
}

func (c *core) closeStalled(e *entry) bool {
	c.mu.Lock()
	closing := !e.removed && !e.migrating && e.c.inFlight() == 1 && e.fate.resumable.Load()
	if closing {
		e.fate.stalled.Store(true)
		c.remove(e)
	}
	c.mu.Unlock()
	if closing {
		c.sched.serve()
	}
	return closing
}

func (c *core) spareFor(e *entry, ok func(*Path) bool) (dialSlot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || e.removed || !c.reg.roomFor(e.key) {
		return dialSlot{}, false
	}
	for _, p := range e.origin.permitted {
		if ok(p) && !c.reg.hasFreeOn(e.key, p) && c.reg.dialing[dialKey{e.key, p}] == 0 {
			return c.reg.takeDialSlot(e.key, e.origin.dest, e.origin.permitted, Choice{Path: p, Fresh: true}, 0), true
		}
	}
	return dialSlot{}, false
}

func (c *core) firstSpares(s dialSlot, on []*Path) []dialSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.reg.entries[s.key]) > 0 {
		return nil
	}
	var slots []dialSlot
	for _, p := range on {
		if c.reg.dialing[dialKey{s.key, p}] == 0 && c.reg.roomFor(s.key) {
			slots = append(slots, c.reg.takeDialSlot(s.key, s.dest, s.permitted, Choice{Path: p, Fresh: true}, 0))
		}
	}
	return slots
}

func (c *core) addSpare(s dialSlot, pc pooled, raw net.Conn, err error, dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) {
	mp := err == nil && mptcpOf(raw) // a system call: before the lock
	c.mu.Lock()
	if err != nil || c.closed {
		c.reg.endDial(s, false)
		c.mu.Unlock()
		if err == nil {
			pc.close()
		}
		c.sched.serve()
		return
	}
	e := c.reg.add(s, pc, raw, mp, dial)
	e.spare = true
	c.changedLocked(e) // idle from the start
	c.sched.serveLocked()
	c.mu.Unlock()
	c.watch(e)
}

func (c *core) startMigration(e *entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.removed || e.migrating || c.closed {
		return false
	}
	e.migrating = true
	return true
}

// migrated: on success a new entry on the new path takes e's place in
// the pool, with the same connection; the requests in flight keep e for
// their bookkeeping. On failure, e on a path that went down is handled as
// any connection there (see loseLocked): closed if that loses nothing,
// else left to its requests, out of the pool; e on a path still up
// stays, and is not moved again for a while.
func (c *core) migrated(e *entry, to *Path, err error, gone bool) {
	c.mu.Lock()
	if err != nil && !gone && !e.removed {
		e.migrating = false // it stays where it is
		c.mu.Unlock()
		return
	}
	if err != nil || e.removed || c.closed {
		if err != nil && !c.closed {
			c.loseLocked(e)
		} else {
			c.remove(e)
		}
		c.mu.Unlock()
		c.sched.serve()
		return
	}
	ne := &entry{key: e.key, path: to, c: e.c, raw: e.raw, created: e.created, lastUsed: time.Now(), mptcp: e.mptcp}
	c.reg.replace(e, ne)
	c.sampler.setActive(e, false)
	e.fate.movedTo.Store(ne)
	c.sampler.setActive(ne, e.c.inFlight() > 0)
	c.mu.Unlock()
	c.watch(ne)
	c.sched.serve()
}
