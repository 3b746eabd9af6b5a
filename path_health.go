package intents

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/sockintents/intents/mptcp"
)

// pathHealth watches the paths under a pool's connections and readies
// the others: it probes a quiet connection's path and takes a silent one
// for dead (deadpath.go), moves an HTTP/3 connection off a path that
// stopped answering it or went away (migrate.go), opens spare connections
// on other paths and measures their RTT with a bare handshake. It owns
// the pool's background work: every run it starts ends by close. It
// reaches the pool only through healthPool, whose methods take the pool's
// lock themselves; its own lock is a leaf, held only to start a run, so
// it may be called under the pool's.
type pathHealth struct {
	m    *Manager // nil: no paths to watch (a pool without a Manager)
	pool healthPool
	// warm has a destination's first connection open a spare one on each
	// other path (see prepareOthers).
	warm bool
	// measure, if set, connects to a destination through a path and closes
	// the connection at once: the handshake is a sample of the path's RTT
	// (see measureOthers).
	measure func(ctx context.Context, p *Path, dest Destination)

	ctx    context.Context // ends with close
	stop   context.CancelFunc
	mu     sync.Mutex // guards closed against runs started as close waits
	closed bool
	runs   sync.WaitGroup
}

// healthPool is what pathHealth asks of the pool it watches. Each method
// takes the pool's lock itself.
type healthPool interface {
	// tcpOn lists the pool's TCP connections on p (not moving, not
	// MPTCP).
	tcpOn(p *Path) []*entry
	// busy reports whether e is in the pool with requests in flight, and
	// for how long it has been.
	busy(e *entry) (active bool, activeFor time.Duration)
	// closeDown handles es as connections on a path that went down or
	// silent (see core.loseLocked): those that lose nothing by it close,
	// their requests sent again or resumed elsewhere; the others stay
	// with their requests, out of the pool. It returns how many stayed.
	closeDown(es []*entry) (stayed int)
	// closeStalled closes e, if it carries one response body that resumes
	// elsewhere (entry.resumable), as stalled: the body asks for its rest
	// on another connection. False if e carries anything else, or is gone.
	closeStalled(e *entry) bool
	// spareFor takes the place in the limits of a spare connection to e's
	// destination on the first of e's other permitted paths where ok
	// (called under the pool's lock) holds, the pool has room and neither
	// a free connection nor a dial in progress. False if there is none,
	// or e is gone.
	spareFor(e *entry, ok func(*Path) bool) (dialSlot, bool)
	// firstSpares takes, if s's destination has no connection yet, the
	// places of spare connections to it on each of on where no dial is in
	// progress, as far as the limits allow.
	firstSpares(s dialSlot, on []*Path) []dialSlot
	// addSpare puts the spare connection s's dial opened in the pool,
	// idle, or gives back s's place if the dial failed (err).
	addSpare(s dialSlot, pc pooled, raw net.Conn, err error, dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error))
	// startMigration marks e as moving to another path: not offered to
	// requests meanwhile. False if it moves already, is gone, or the pool
	// is closed.
	startMigration(e *entry) bool
	// migrated ends e's move (see startMigration): on to, or failed with
	// err on a path that went away (gone) or is still up.
	migrated(e *entry, to *Path, err error, gone bool)
}

func newPathHealth(m *Manager, pool healthPool, warm bool, measure func(ctx context.Context, p *Path, dest Destination)) *pathHealth {
	h := &pathHealth{m: m, pool: pool, warm: warm, measure: measure}
	h.ctx, h.stop = context.WithCancel(context.Background())
	return h
}

// run starts f as background work that close ends (f watches h.ctx) and
// waits for; false, without starting it, once close has begun.
func (h *pathHealth) run(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.runs.Go(f)
	return true
}

// close ends the background work and waits for it.
func (h *pathHealth) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.stop()
	h.runs.Wait()
}

// spareTimeout bounds the dial of a spare connection.
const spareTimeout = 10 * time.Second

// warmSpare opens, while e's path is being probed, an idle connection to
// e's destination on the next path that the request that opened e could
// use and every request given e since permits (up, not marked
// Unresponsive), if it has none free there and the limits allow one more:
// if e's path is dead, the request sent again or resumed finds the
// handshakes done (a TCP and a TLS round trip saved); if not, the
// connection idles like any other.
func (h *pathHealth) warmSpare(e *entry) {
	if e.origin.dial == nil {
		return
	}
	family := networkFamily(e.origin.dest.Network)
	s, ok := h.pool.spareFor(e, func(p *Path) bool {
		return p.Name != e.path.Name && p.Up && responsive(p) && allPermit(e.granted, p, family)
	})
	if ok {
		h.openSpare(s, spareTimeout, e.origin.dial)
	}
}

// allPermit reports whether every one of ins permits p.
func allPermit(ins []Intents, p *Path, family byte) bool {
	for i := range ins {
		if ok, _ := permit(&ins[i], []*Path{p}, family, false); len(ok) == 0 {
			return false
		}
	}
	return true
}

// openSpare dials in the background, within timeout, the spare connection
// s allows, and has the pool keep it idle.
func (h *pathHealth) openSpare(s dialSlot, timeout time.Duration, dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) {
	started := h.run(func() {
		ctx, cancel := context.WithTimeout(h.ctx, timeout)
		pc, raw, err := dial(ctx, s.choice)
		cancel()
		h.pool.addSpare(s, pc, raw, err, dial)
		if log := h.m.debugLogger(context.Background()); log != nil && err == nil {
			log.Debug("intents: spare connection opened", "path", s.path.Name, "dest", s.key)
		}
	})
	if !started {
		h.pool.addSpare(s, nil, nil, errPoolClosed, nil)
	}
}

// prepareOthers readies, while s's connection is dialed, the request's
// other permitted paths for the requests that may follow it.
//
// If the pool warms (a Transport) and s is the destination's first
// connection (none open yet), a spare connection is opened on each other
// path the request may use that is up, answers, is neither expensive nor
// constrained, and which the request does not avoid, as far as the limits
// allow: its handshake measures the path's RTT, and a request the policy
// sends there later finds the connection open, a round trip sooner (two
// with TLS), its handshakes done while the first path fetched the first
// response. An unused spare is an idle connection like any other: closed
// by the idle limits, or to make room at the host's limit, where it goes
// first (see idleConns.closeOf). At most one per path each time a
// destination is first contacted: its connections after the first do not
// warm again.
//
// Every other path that has no RTT yet and gets no spare is measured with
// a bare handshake (see measureOthers).
func (h *pathHealth) prepareOthers(s dialSlot, in *Intents, dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) {
	if s.path == nil || len(s.permitted) < 2 || s.dest.Network != "tcp" {
		return
	}
	var warmed []*Path
	if h.warm && in != nil && dial != nil {
		var on []*Path
		for _, p := range s.permitted {
			if p.Name != s.path.Name && warmable(p, in) {
				on = append(on, p)
			}
		}
		for _, spare := range h.pool.firstSpares(s, on) {
			h.openSpare(spare, warmTimeout, dial)
			warmed = append(warmed, spare.path)
		}
	}
	h.measureOthers(s, warmed)
}

// warmTimeout bounds the dial of a warmed spare connection: it holds a
// place in the limits while it dials, and a handshake this slow has
// measured a retransmission, not the path (see probeRTTTimeout).
const warmTimeout = probeRTTTimeout

// warmable reports whether a spare connection for a request with intents
// in may be opened on p before the request's policy sent anything there
// (see prepareOthers): not where a connection costs (expensive or
// constrained), nor where the request would rather not go.
func warmable(p *Path, in *Intents) bool {
	if !p.Up || !responsive(p) || p.Expensive || p.Constrained {
		return false
	}
	if in.Multipath == MultipathHandover && mptcp.Supported() == nil {
		// An MPTCP handover connection has a backup subflow on the other
		// paths already. A spare would be a handover connection that
		// starts there, and an endpoint's backup flag (one per address,
		// for every connection) cannot be backup for the first and not
		// for the spare: the first's backup subflow would carry data.
		return false
	}
	l, _ := effectiveLevel(in, p)
	return l != LevelAvoid && l != LevelProhibit
}

// measureOthers measures, while s's connection is dialed, the RTT of the
// request's other permitted paths that have none yet and no spare
// connection dialing (warmed): a policy that knows no RTT for a path
// either avoids it (and never learns) or tries it with a request (which
// waits for it if the path is slow). A bare handshake, one per path at a
// time, tells it at the cost of a SYN.
func (h *pathHealth) measureOthers(s dialSlot, warmed []*Path) {
	if h.measure == nil || s.path == nil || s.dest.Network != "tcp" {
		return
	}
	for _, p := range s.permitted {
		if p == s.path || !p.Up || p.est == nil || p.Estimate().Measured ||
			slices.Contains(warmed, p) || !p.est.StartProbe() {
			continue
		}
		if !h.run(func() {
			defer p.est.EndProbe()
			h.measure(h.ctx, p, s.dest)
		}) {
			p.est.EndProbe()
		}
	}
}
