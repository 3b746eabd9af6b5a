package intents

import (
	"context"
	"net"
	"slices"
	"time"
)

// registry is a pool's connections by destination and the dials under
// way, counted against the pool's limits, with the pool's counters per
// path. Bookkeeping only: it closes nothing and makes no system call.
// Guarded by its core's mu.
type registry struct {
	maxPerHost int // connections to one destination; 0: no limit
	maxTotal   int // connections in all; 0: no limit

	entries map[string][]*entry // by key
	dialing map[dialKey]int     // dials in progress, by key and path
	total   int                 // entries plus dials in progress
	nextID  uint64
	stats   map[string]*PathStats
}

func newRegistry(l limits) registry {
	return registry{maxPerHost: l.maxPerHost, maxTotal: l.maxTotal,
		entries: map[string][]*entry{}, dialing: map[dialKey]int{}, stats: map[string]*PathStats{}}
}

// dialSlot is the right to open one connection to key over path: counted
// against the pool's limits, and at once as load on the path, so that
// decisions made while the dial is under way see it. endDial is the one
// place its counts are given back.
type dialSlot struct {
	key       string
	dest      Destination
	path      *Path
	choice    Choice
	size      int64
	permitted []*Path // the paths the request may use
}

// dialKey names the dials in progress to one destination over one path.
type dialKey struct {
	key  string
	path *Path
}

// takeDialSlot counts a new dial to key on ch.Path.
func (r *registry) takeDialSlot(key string, dest Destination, permitted []*Path, ch Choice, size int64) dialSlot {
	r.dialing[dialKey{key, ch.Path}]++
	r.total++
	ch.Path.addActive(1)
	ch.Path.addPending(size)
	return dialSlot{key: key, dest: dest, path: ch.Path, choice: ch, size: size, permitted: permitted}
}

// endDial gives back the counts of s: all of them if the dial failed or
// was not used; if it opened a connection, the connection now holds its
// place in the total and its path's counts are the entry's.
func (r *registry) endDial(s dialSlot, opened bool) {
	k := dialKey{s.key, s.path}
	switch n := r.dialing[k]; {
	case n > 1:
		r.dialing[k] = n - 1
	case n == 1:
		delete(r.dialing, k)
	default:
		panic("intents: dial slot given back twice")
	}
	if !opened {
		if r.total--; r.total < 0 {
			panic("intents: pool total below zero")
		}
	}
	s.path.addActive(-1)
	s.path.addPending(-s.size)
}

// dialingTo counts the dials in progress to a destination, over any path.
// The map holds only dials under way: a few entries.
func (r *registry) dialingTo(key string) int {
	n := 0
	for k, d := range r.dialing {
		if k.key == key {
			n += d
		}
	}
	return n
}

// add registers the connection that s's dial opened; the slot's place in
// the limits becomes the entry's. mptcp says whether it runs MPTCP (read
// before the pool's lock: a system call).
func (r *registry) add(s dialSlot, pc pooled, raw net.Conn, mptcp bool, dial func(ctx context.Context, ch Choice) (pooled, net.Conn, error)) *entry {
	now := time.Now()
	e := &entry{key: s.key, path: s.path, c: pc, raw: raw, created: now, lastUsed: now, mptcp: mptcp,
		origin: entryOrigin{dest: s.dest, permitted: s.permitted, dial: dial}}
	r.nextID++
	e.id = r.nextID
	r.endDial(s, true)
	r.entries[s.key] = append(r.entries[s.key], e)
	r.stat(s.path).Dials++
	return e
}

// replace registers ne, the connection of e (which it leaves) now on
// another path: a migration.
func (r *registry) replace(e, ne *entry) {
	r.nextID++
	ne.id = r.nextID
	r.detach(e)
	r.entries[ne.key] = append(r.entries[ne.key], ne)
	r.total++
	r.stat(ne.path).Migrated++
}

// detach takes e out of the registry, leaving its connection open.
func (r *registry) detach(e *entry) {
	e.removed = true
	es := r.entries[e.key]
	if i := slices.Index(es, e); i >= 0 {
		// A new slice, not slices.Delete in place: callers iterate views of
		// the old one (a sweep) while removing.
		r.entries[e.key] = append(es[:i:i], es[i+1:]...)
		if len(r.entries[e.key]) == 0 {
			delete(r.entries, e.key)
		}
		r.total--
	}
}

// stat is p's counters.
func (r *registry) stat(p *Path) *PathStats {
	s := r.stats[pathName(p)]
	if s == nil {
		s = &PathStats{}
		r.stats[pathName(p)] = s
	}
	return s
}

// pathStats is a copy of the counters, with the connections active and
// idle on each path.
func (r *registry) pathStats() map[string]PathStats {
	out := make(map[string]PathStats, len(r.stats))
	for name, s := range r.stats {
		out[name] = PathStats{Reuses: s.Reuses, Dials: s.Dials, Migrated: s.Migrated}
	}
	for _, es := range r.entries {
		for _, e := range es {
			s := out[pathName(e.path)]
			if e.c.inFlight() > 0 {
				s.Active++
			} else {
				s.Idle++
			}
			out[pathName(e.path)] = s
		}
	}
	return out
}

// roomFor reports whether key may have one more connection by both
// limits.
func (r *registry) roomFor(key string) bool {
	return r.underHostLimit(key) && (r.maxTotal <= 0 || r.total < r.maxTotal)
}

// underHostLimit reports whether key may have one more connection by the
// per-destination limit.
func (r *registry) underHostLimit(key string) bool {
	return r.maxPerHost <= 0 || len(r.entries[key])+r.dialingTo(key) < r.maxPerHost
}

// connsOn counts key's connections on p, open or being opened.
func (r *registry) connsOn(key string, p *Path) int {
	n := r.dialing[dialKey{key, p}]
	for _, e := range r.entries[key] {
		if e.path == p {
			n++
		}
	}
	return n
}

// byID is key's connection with id, nil if it has none.
func (r *registry) byID(key string, id uint64) *entry {
	for _, e := range r.entries[key] {
		if e.id == id {
			return e
		}
	}
	return nil
}

// hasFreeOn reports whether key has a connection on p that can take a
// request.
func (r *registry) hasFreeOn(key string, p *Path) bool {
	for _, e := range r.entries[key] {
		if e.path != nil && e.path.Name == p.Name && !e.migrating && e.c.available() > 0 {
			return true
		}
	}
	return false
}

// anyFree reports whether key has a connection that can take a request
// now.
func (r *registry) anyFree(key string) bool {
	for _, e := range r.entries[key] {
		if e.c.available() > 0 && !e.removed {
			return true
		}
	}
	return false
}

// idleElsewhere reports whether key has an idle connection on a path
// other than p.
func (r *registry) idleElsewhere(key string, p *Path) bool {
	for _, e := range r.entries[key] {
		if e.path != p && e.c.inFlight() == 0 && !e.removed {
			return true
		}
	}
	return false
}

// tcpOn lists the TCP HTTP connections on p (not moving, not MPTCP).
func (r *registry) tcpOn(p *Path) []*entry {
	var on []*entry
	for _, es := range r.entries {
		for _, e := range es {
			if e.c.carrier() == carrierTCP && e.path != nil && e.path.Name == p.Name && !e.migrating && !e.mptcp {
				on = append(on, e)
			}
		}
	}
	return on
}
