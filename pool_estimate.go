package intents

import (
	"sync"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/tcpinfo"
)

// Feeding the path estimators from the pool's connections: which are
// active on which path, their TCP_INFO, and each path's delivery rate.

// sampleInterval is how often active connections are sampled, as the
// Socket Intents prototype did.
const sampleInterval = 100 * time.Millisecond

// sampler keeps the connections with requests in flight, counts them as
// active on their paths, and samples them while there are any. Its lock is
// its own: the pool's is taken before it, never after.
type sampler struct {
	mu       sync.Mutex
	active   []*entry
	ticker   *time.Timer // armed while anything is active
	lastTick time.Time
	windows  map[string]*deliveryWindow // by path name
	stopped  bool
	// stalled, if set, is told of an active connection whose path stopped
	// answering it (see h3Conn.stalled), from a tick, outside s.mu.
	stalled func(*entry)
	// quiet, if set, is given each active TCP connection's TCP_INFO and
	// since when it has had requests in flight (see pathHealth.checkQuiet),
	// from a tick, outside s.mu; it returns when to look again, if sooner
	// than the next tick is worth it (0: no sooner).
	quiet func(e *entry, info tcpinfo.Info, activeSince time.Time) time.Duration
	// watcher runs watch while anything is active.
	watcher *time.Timer
}

// activeFor is how long e has had requests in flight (since it last
// became active, if it is not now).
func (s *sampler) activeFor(e *entry) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(e.sample.activeSince)
}

// watchInterval is how often watch looks at the active connections:
// a path that went silent is to be noticed within a few of them of the
// time its silence says so.
const watchInterval = 20 * time.Millisecond

// setActive counts e as active (requests in flight) on its path or not, and
// keeps the sampling tick running while anything is active.
func (s *sampler) setActive(e *entry, active bool) {
	if e.path == nil {
		return // routed by the OS: no path to estimate, nothing to sample
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.sample.active == active {
		return
	}
	e.sample.active = active
	if !active {
		e.path.addActive(-1)
		for i, a := range s.active {
			if a == e {
				last := len(s.active) - 1
				s.active[i] = s.active[last]
				s.active[last] = nil
				s.active = s.active[:last]
				break
			}
		}
		return
	}
	e.path.addActive(1)
	e.sample.tickBytes = e.bytesIn.Load()
	e.sample.activeSince = time.Now()
	s.active = append(s.active, e)
	if s.ticker == nil && !s.stopped {
		s.lastTick = time.Now()
		s.ticker = time.AfterFunc(sampleInterval, s.tick)
	}
	if s.watcher == nil && !s.stopped {
		s.watcher = time.AfterFunc(watchInterval, s.watch)
	}
}

// watch looks at the active connections between ticks, for the ones
// whose path may have gone silent: every HTTP/3 connection (its bytes
// received, a cheap look: see h3Conn.stalled), and the TCP connections
// due a look (see pathHealth.checkQuiet). It stops when nothing is active.
func (s *sampler) watch() {
	s.mu.Lock()
	now := time.Now()
	var look []*entry
	var lookSince []time.Time
	for _, e := range s.active {
		if _, ok := e.c.(stallWatcher); ok || (!e.sample.quietAt.IsZero() && !now.Before(e.sample.quietAt)) {
			look = append(look, e)
			lookSince = append(lookSince, e.sample.activeSince)
		}
	}
	if len(s.active) == 0 || s.stopped || s.watcher == nil {
		s.watcher = nil
	} else {
		s.watcher.Reset(watchInterval)
	}
	s.mu.Unlock()
	for i, e := range look {
		if sw, ok := e.c.(stallWatcher); ok {
			if s.stalled != nil && sw.stalled(now) {
				s.stalled(e)
			}
			continue
		}
		if info, ok := tcpInfoOf(e); ok {
			s.lookQuiet(e, info, lookSince[i], now)
		}
	}
}

// lookQuiet gives e's TCP_INFO to s.quiet and notes when to look again.
func (s *sampler) lookQuiet(e *entry, info tcpinfo.Info, activeSince, now time.Time) {
	if s.quiet == nil {
		return
	}
	next := s.quiet(e, info, activeSince)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.sample.quietAt = time.Time{}
	if next > 0 {
		e.sample.quietAt = now.Add(next)
	}
}

// stop ends the sampling for good.
func (s *sampler) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.ticker != nil {
		s.ticker.Stop()
		s.ticker = nil
	}
	if s.watcher != nil {
		s.watcher.Stop()
		s.watcher = nil
	}
}

// tick samples the active connections: TCP_INFO of each, and the bytes
// each path delivered since the last tick (its delivery rate, all of the
// path's connections together). It stops when nothing is active. The
// system calls (TCP_INFO, the interfaces' counters in sysfs) run outside
// every lock.
func (s *sampler) tick() {
	s.mu.Lock()
	now := time.Now()
	elapsed := now.Sub(s.lastTick)
	s.lastTick = now
	delivered := map[*Path]int64{}
	active := make([]*entry, len(s.active))
	copy(active, s.active)
	activeSince := make([]time.Time, len(active))
	for i, e := range active {
		activeSince[i] = e.sample.activeSince
		in := e.bytesIn.Load()
		delivered[e.path] += in - e.sample.tickBytes
		e.sample.tickBytes = in
	}
	if len(active) == 0 || s.stopped || s.ticker == nil { // nil: called other than by the timer
		s.ticker = nil
	} else {
		s.ticker.Reset(sampleInterval)
	}
	s.mu.Unlock()

	for i, e := range active {
		if info, ok := sampleTCP(e); ok {
			s.lookQuiet(e, info, activeSince[i], now)
		}
	}
	rx := map[*Path]int64{}
	for p := range delivered {
		if n, ok := ifaceRxBytes(p.Name); ok {
			rx[p] = n
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.windows == nil {
		s.windows = map[string]*deliveryWindow{}
	}
	for name := range s.windows {
		if !hasPathNamed(delivered, name) {
			delete(s.windows, name) // idle: a gap must not dilute the next rate
		}
	}
	for p, n := range delivered {
		w := s.windows[p.Name]
		if w == nil {
			w = &deliveryWindow{}
			s.windows[p.Name] = w
		}
		cur, rxOK := rx[p]
		rxDelta := int64(-1)
		if rxOK && w.rxValid {
			rxDelta = cur - w.lastRx
		}
		w.lastRx, w.rxValid = cur, rxOK
		if bytes, d, ok := w.add(n, rxDelta, elapsed); ok {
			p.sampleDelivery(bytes, d)
		}
	}
}

func hasPathNamed(m map[*Path]int64, name string) bool {
	for p := range m {
		if p.Name == name {
			return true
		}
	}
	return false
}

// sampleTCP feeds e's TCP_INFO (RTT, loss), or an HTTP/3 connection's
// RTT estimate, to its path's estimates, and returns the TCP_INFO, if
// there is one. It makes a system call: never under a pool lock.
func sampleTCP(e *entry) (tcpinfo.Info, bool) {
	if e.path == nil || e.raw == nil {
		return tcpinfo.Info{}, false
	}
	if q, ok := e.c.(interface{ rtt() time.Duration }); ok {
		// QUIC's own estimate: its socket has no TCP_INFO.
		if rtt := q.rtt(); rtt > 0 {
			e.path.sampleRTT(rtt)
		}
		return tcpinfo.Info{}, false
	}
	info, ok := tcpInfoOf(e)
	if !ok {
		return info, false
	}
	e.path.sampleRTT(info.RTT)
	// The smoothed RTT holds the queue the transfer built; the kernel's
	// minimum over every timed acknowledgment is the path's own delay
	// better than the few handshakes a pooled connection gives.
	e.path.sampleMinRTT(info.MinRTT)
	e.probe.mu.Lock()
	defer e.probe.mu.Unlock()
	if e.path.est != nil && info.DataSegsOut >= e.probe.lastSegs && info.Retrans >= e.probe.lastRetrans {
		e.path.est.AddLoss(info.Retrans-e.probe.lastRetrans, info.DataSegsOut-e.probe.lastSegs)
	}
	e.probe.lastRetrans, e.probe.lastSegs = info.Retrans, info.DataSegsOut
	return info, true
}

// tcpInfoOf reads the TCP_INFO of e's socket, if it has one. A system
// call: never under a pool lock.
func tcpInfoOf(e *entry) (tcpinfo.Info, bool) {
	sc, ok := e.raw.(syscall.Conn)
	if !ok {
		return tcpinfo.Info{}, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return tcpinfo.Info{}, false
	}
	info, err := tcpinfo.Get(rc)
	return info, err == nil
}

// unreadOf is how many bytes have arrived on e's socket that nobody has
// read yet: 0 where that cannot be told (not Linux, not a TCP socket).
func unreadOf(e *entry) int64 {
	info, ok := tcpInfoOf(e)
	if !ok {
		return 0
	}
	return int64(info.Unread)
}

// deliveryWindow sums a path's delivered bytes over its last few ticks.
// Single ticks are too short: when loss recovery fills a hole, a burst of
// buffered data becomes readable at once, and 100 ms after a quiet 100 ms
// shows twice the link's rate.
//
// Where the interface's counters could be read at every tick of the
// window, a window counts what it received: what this library read in a
// window includes bytes that had waited in its sockets since before it
// (readers scheduled late), and the counters see other programs'
// traffic too, so the path's capacity shows even when this library is
// not the only one using it (their headers make them a few percent more
// than the payload). Else it counts the larger of the two. The two are
// summed apart: data that arrived out of order is received in one tick
// and read in a later one.
type deliveryWindow struct {
	bytes   [deliveryTicks]int64
	rx      [deliveryTicks]int64 // negative: not read at that tick
	durs    [deliveryTicks]time.Duration
	n, i    int
	lastRx  int64
	rxValid bool
}

const deliveryTicks = 10 // 1 s: many round trips of most paths

// add counts a tick: bytes read, rx received by the interface (negative:
// its counters could not be read at both ends of the tick), over d.
func (w *deliveryWindow) add(bytes, rx int64, d time.Duration) (int64, time.Duration, bool) {
	w.bytes[w.i], w.rx[w.i], w.durs[w.i] = bytes, rx, d
	w.i = (w.i + 1) % deliveryTicks
	w.n = min(w.n+1, deliveryTicks)
	if w.n < deliveryTicks {
		return 0, 0, false
	}
	var sb, srx int64
	var sd time.Duration
	counted := true
	for k := range deliveryTicks {
		sb += w.bytes[k]
		srx += max(w.rx[k], 0)
		counted = counted && w.rx[k] >= 0
		sd += w.durs[k]
	}
	if counted {
		return srx, sd, true
	}
	return max(sb, srx), sd, true
}
