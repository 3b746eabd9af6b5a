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
func (h *pathHealth) migrateStalled(e *entry) {
	mg, ok := e.c.(migratable)
	if !ok || h.m == nil || !h.pool.startMigration(e) {
		return
	}
	if !h.run(func() { h.migrate(e, mg, false) }) {
		h.pool.migrated(e, nil, errPoolClosed, false)
	}
}

// migrate moves e, whose path went down (gone) or stopped answering it,
// to another path (see core.drainGonePaths, migrateStalled), and tells
// the pool how it went (healthPool.migrated). Runs as background work,
// which close ends.
func (h *pathHealth) migrate(e *entry, mg migratable, gone bool) {
	ctx, cancel := context.WithTimeout(h.ctx, migrateTimeout)
	defer cancel()
	to, err := mg.migrate(ctx, h.m, e.path)
	if err != nil && !gone {
		mg.stallRetryFrom(time.Now())
	}
	if log := h.m.debugLogger(ctx); log != nil {
		if err != nil {
			log.Debug("intents: migration failed", "from", e.path.Name, "err", err)
		} else {
			log.Debug("intents: connection migrated", "from", e.path.Name, "to", to.Name)
		}
	}
	h.pool.migrated(e, to, err, gone)
}
