package intents

import (
	"context"
	"time"
)

// migrateTimeout bounds a connection's migration: probing the new path
// takes a round trip on it, a few if packets are lost.
const migrateTimeout = 5 * time.Second

// migratable is a pooled connection that can move to another path with
// its requests in flight (an HTTP/3 connection).
type migratable interface {
	// prepare readies the moves from path on, as soon as it is opened.
	prepare(ctx context.Context, m *Manager, on *Path)
	migrate(ctx context.Context, m *Manager, from *Path) (*Path, error)
	// stallRetryFrom holds off judging it stalled again for a while
	// after a move from a path still up failed.
	stallRetryFrom(now time.Time)
}

// migrateStalled moves e, whose path stopped answering it while its path
// is up (see h3Conn.stalled), to another path, if it is not moving yet.
func (c *core) migrateStalled(e *entry) {
	mg, ok := e.c.(migratable)
	if !ok || c.m == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.removed || e.migrating || c.closed {
		return
	}
	e.migrating = true
	c.measuring.Go(func() { c.migrate(e, mg, false) })
}

// migrate moves e, whose path went down (gone) or stopped answering it,
// to another path (see drainGonePaths, migrateStalled). On success a new
// entry on the new path takes e's place in the pool, with the same
// connection; the requests in flight keep e for their bookkeeping. On
// failure, e on a path that went down is removed and closed as any
// connection there: its requests fail with a PathDownError; e on a path
// still up stays, and is not moved again for a while. Runs as the pool's
// background work, which close ends.
func (c *core) migrate(e *entry, mg migratable, gone bool) {
	ctx, cancel := context.WithTimeout(c.measureCtx, migrateTimeout)
	defer cancel()
	to, err := mg.migrate(ctx, c.m, e.path)
	if err != nil && !gone {
		mg.stallRetryFrom(time.Now())
	}
	if log := c.m.debugLogger(ctx); log != nil {
		if err != nil {
			log.Debug("intents: migration failed", "from", e.path.Name, "err", err)
		} else {
			log.Debug("intents: connection migrated", "from", e.path.Name, "to", to.Name)
		}
	}
	c.mu.Lock()
	if err != nil && !gone && !e.removed && !c.closed {
		e.migrating = false // it stays where it is
		c.mu.Unlock()
		return
	}
	if err != nil || e.removed || c.closed {
		e.pathDown.Store(err != nil)
		c.remove(e)
		c.mu.Unlock()
		c.serve()
		return
	}
	now := time.Now()
	ne := &entry{key: e.key, path: to, c: e.c, raw: e.raw, created: e.created, lastUsed: now, mptcp: e.mptcp}
	c.nextID++
	ne.id = c.nextID
	c.detach(e)
	e.movedTo.Store(ne)
	c.entries[ne.key] = append(c.entries[ne.key], ne)
	c.total++
	c.stat(to).Migrated++
	c.sampler.setActive(ne, e.c.inFlight() > 0)
	c.mu.Unlock()
	c.watch(ne)
	c.serve()
}
