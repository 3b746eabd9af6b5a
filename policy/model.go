package policy

import (
	"time"

	"github.com/sockintents/intents"
)

// Model is the transfer-time model of the Socket Intents prototype's EAF
// policy and its simulator: set-up round trips, then TCP slow start from an
// initial window doubling every round trip until the window no longer
// limits (its rate reaches the path's free capacity share), then the rest
// at that share.
//
// Unlike the paper's simulator, the rounds after the first arrive spread
// over their round trip, as a pacing sender sends them (Linux with BBR, or
// any congestion control over the fq qdisc), as measured on the testbed
// (see Unpaced).
type Model struct {
	// TLSRoundTrips is the TLS handshake's cost for https (default 1: TLS
	// 1.3; the paper's simulator charged 2, TLS 1.2's figure).
	TLSRoundTrips int
	// InitialWindow is the initial congestion window in segments (default
	// 10, RFC 6928).
	InitialWindow int
	// MSS is the segment payload in bytes (default 1448).
	MSS int
	// UnknownRTT stands in for the RTT of a path with no estimate and no
	// prior (default 100 ms): pessimistic, so known paths win until the
	// unknown one is measured (see models). UnknownBandwidth (bits/s)
	// stands in for capacity while no path's is known, as on a new
	// Manager's first page (default 10 Mbit/s, an access network's order):
	// it weighs a path's backlog against another's longer RTT, and a guess
	// far below the paths' real rates sends small objects to the slower
	// path after a few on the faster one. A path with no capacity
	// estimate, or only a floor, while another has one borrows that
	// one's, if it is higher.
	UnknownRTT       time.Duration
	UnknownBandwidth int64
	// Unpaced makes every slow-start round arrive at once, as from a sender
	// that does not pace (the paper's simulator).
	Unpaced bool
}

// modelParams are a Model's settings with the defaults filled in.
type modelParams struct {
	tlsRoundTrips, initialWindow, mss int
	unknownRTT                        time.Duration
	unknownBandwidth                  int64
}

func (m *Model) params() modelParams {
	p := modelParams{tlsRoundTrips: 1, initialWindow: 10, mss: 1448, unknownRTT: 100 * time.Millisecond, unknownBandwidth: 10e6}
	if m.TLSRoundTrips > 0 {
		p.tlsRoundTrips = m.TLSRoundTrips
	}
	if m.InitialWindow > 0 {
		p.initialWindow = m.InitialWindow
	}
	if m.MSS > 0 {
		p.mss = m.MSS
	}
	if m.UnknownRTT > 0 {
		p.unknownRTT = m.UnknownRTT
	}
	if m.UnknownBandwidth > 0 {
		p.unknownBandwidth = m.UnknownBandwidth
	}
	return p
}

// pathModel is one path as the model sees it.
type pathModel struct {
	rtt     float64 // seconds
	free    float64 // bytes per second
	iw      float64 // bytes
	cap     float64 // capacity, bytes per second
	pending float64 // bytes other transfers on the path still expect
	active  float64 // connections with transfers in progress
	paced   bool    // rounds after the first arrive spread over their round trip
	// measured says cap is the path's own measured capacity, not a guess
	// (a default, another path's, or a floor).
	measured bool
	// unseen says the path has not delivered a transfer that showed
	// anything of its capacity, not even a floor: cap is a guess.
	unseen bool
	// rttGuessed says the path's RTT is not measured: rtt is lent (see
	// models).
	rttGuessed bool
}

// shared bounds a transfer's time by the path's backlog. The transfers
// beside it share the capacity fairly (as TCP's do, roughly), so until
// this one's size bytes are in each of the active others has had at most
// as many: it cannot be in before (min(pending, active·size) + size) /
// capacity. The prototype's free share alone misses load whose delivery
// rate has not been measured yet, as when a page's requests all start at
// once; a bound of all pending bytes (first come, first served) would
// make a small object wait for a large one it would in fact overtake.
func (pm pathModel) shared(size, t float64) float64 {
	if size <= 0 || pm.pending <= 0 || pm.cap <= 0 { // no size hint: nothing to share
		return t
	}
	ahead := pm.pending
	if pm.active > 0 {
		ahead = min(ahead, pm.active*size)
	}
	return max(t, (ahead+size)/pm.cap)
}

func (m *Model) path(p *intents.Path) pathModel {
	return m.pathWith(p.Estimate(), 0, 0)
}

// models returns the models of paths. A path with no capacity estimate
// borrows the highest of the others, or UnknownBandwidth if that is higher
// (a slow path measured says nothing of an unmeasured one, and lent to it
// would keep the page on the slow one), so that it is tried, and so
// measured, rather than avoided for ever; a path whose capacity is only a
// floor (Estimate.BandwidthFloor) borrows as much: small objects on a long
// RTT end in slow start and never show a path's capacity, and a policy
// that believed the floor (or a slower path's capacity) would starve the
// path. A path with no RTT estimate counts the
// higher of UnknownRTT and the lowest measured: an RTT is learned without
// risking a request (a handshake: the Transport and Pool measure a
// request's other paths while its connection is dialed), and a request
// sent to a path on a borrowed RTT waits its real one, seconds where the
// path is bad. With nothing known anywhere the Unknown defaults stand.
func (m *Model) models(paths []*intents.Path, dst []pathModel) []pathModel {
	var bestRTT time.Duration
	var bestBW int64
	var ebuf [16]intents.Estimate
	ests := ebuf[:0]
	for _, p := range paths {
		e := p.Estimate()
		ests = append(ests, e)
		if e.RTT > 0 && (bestRTT == 0 || e.RTT < bestRTT) {
			bestRTT = e.RTT
		}
		bestBW = max(bestBW, e.Bandwidth)
	}
	unknownRTT := max(bestRTT, m.params().unknownRTT)
	lent := max(bestBW, m.params().unknownBandwidth)
	for _, e := range ests {
		if e.BandwidthFloor && e.Bandwidth > 0 {
			e.Bandwidth = lent // a floor says no less than an unmeasured path is lent
		}
		dst = append(dst, m.pathWith(e, unknownRTT, lent))
	}
	return dst
}

func (m *Model) pathWith(e intents.Estimate, fallbackRTT time.Duration, fallbackBW int64) pathModel {
	mp := m.params()
	iw, mss, rtt, bw := mp.initialWindow, mp.mss, mp.unknownRTT, mp.unknownBandwidth
	if fallbackRTT > 0 {
		rtt = fallbackRTT
	}
	if fallbackBW > 0 {
		bw = fallbackBW
	}
	if e.RTT > 0 {
		rtt = e.RTT
	}
	capacity := e.Bandwidth
	if capacity <= 0 {
		capacity = bw
	}
	free := e.FreeBandwidth()
	switch {
	case e.Pending > 0:
		// The others' backlog is known, and shared bounds a transfer by
		// it. The free share assumes their load lasts as long as this
		// transfer: on top of shared it counted the load twice.
		free = capacity
	case free <= 0:
		free = bw
	}
	return pathModel{rtt: rtt.Seconds(), free: float64(free) / 8, iw: float64(iw * mss),
		cap: float64(capacity) / 8, pending: float64(e.Pending), active: float64(e.Active), paced: !m.Unpaced,
		measured: e.Bandwidth > 0 && !e.BandwidthFloor, unseen: e.Bandwidth <= 0, rttGuessed: e.RTT <= 0}
}

// bytesBy is how many bytes have arrived tau seconds after the first
// round's data arrived, on a connection whose first round is window bytes
// (pm.iw on a new connection). Each round doubles the window (slow start)
// until its rate reaches the free share; from then on bytes arrive at that
// share.
func (pm pathModel) bytesBy(tau, window float64) float64 {
	if tau < 0 {
		return 0
	}
	var total, t float64
	for w := window; ; w *= 2 {
		if w/pm.rtt >= pm.free { // the window no longer limits
			return total + pm.free*(tau-t)
		}
		if tau < t+pm.rtt {
			if pm.paced && t > 0 {
				return total + w*(tau-t)/pm.rtt
			}
			return total + w
		}
		total += w
		t += pm.rtt
	}
}

// transfer is the time from the first round's arrival until size bytes
// are in, the inverse of bytesBy.
func (pm pathModel) transfer(size, window float64) float64 {
	if size <= 0 {
		return 0
	}
	var total, t float64
	for w := window; ; w *= 2 {
		if w/pm.rtt >= pm.free {
			return t + (size-total)/pm.free
		}
		if total+w >= size {
			if pm.paced && t > 0 {
				return t + (size-total)*pm.rtt/w
			}
			return t
		}
		total += w
		t += pm.rtt
	}
}

// drain is how long a busy connection takes to deliver the pending bytes
// it still owes and the queued bytes of the requests waiting for it,
// sharing the path with the others' backlog as shared describes, and the
// path after that: each of the others has had as many bytes meanwhile.
func (pm pathModel) drain(pending, queued float64) (float64, pathModel) {
	others := pm
	others.pending -= pending
	others.active = max(pm.active-1, 0)
	own := pending + queued
	wait := others.shared(own, own/pm.free)
	after := pm
	after.pending = max(others.pending-others.active*own, 0)
	return wait, after
}

// window is the congestion window a pooled connection starts the next
// transfer with: the server's slow start has grown it by every byte it
// delivered (those still pending included), unless it sat idle for longer
// than warmAfterIdle and restarted from the initial window.
func (pm pathModel) window(c *intents.Candidate) float64 {
	if c.InFlight == 0 && c.Idle >= warmAfterIdle {
		return pm.iw
	}
	return pm.iw + float64(c.BytesIn+c.Pending)
}

// setupRTTs is the set-up cost in round trips: 1 to send on an open
// connection, 2 to open one first, plus the TLS handshake.
func (m *Model) setupRTTs(fresh, tls bool) float64 {
	if !fresh {
		return 1
	}
	n := 2.0
	if tls {
		n += float64(m.params().tlsRoundTrips)
	}
	return n
}

// warmAfterIdle: Linux restarts slow start on a connection idle for longer
// than its retransmission timeout (tcp_slow_start_after_idle); 1 s is the
// RTO's floor.
const warmAfterIdle = time.Second

// NewConn predicts the completion time of size bytes over a new connection
// on p.
func (m *Model) NewConn(p *intents.Path, size int64, tls bool) time.Duration {
	pm := m.path(p)
	setup := m.setupRTTs(true, tls) * pm.rtt
	return seconds(setup + pm.shared(float64(size), pm.transfer(float64(size), pm.iw)))
}

// Reuse predicts the completion time of size bytes over the pooled
// connection c: one round trip to ask, after it is done with what it still
// owes and with the requests waiting for it (a round trip each), with the
// window its earlier transfers grew (see pathModel.window). On a free
// stream of a multiplexed connection it shares the connection with the
// streams in flight instead of waiting for them.
func (m *Model) Reuse(c *intents.Candidate, size int64) time.Duration {
	return seconds(m.reuse(m.path(c.Path), c, float64(size)))
}

// reuse is Reuse in seconds, with c's path modelled by pm.
func (m *Model) reuse(pm pathModel, c *intents.Candidate, size float64) float64 {
	if c.Available > 0 && c.InFlight > 0 {
		// A free stream of a multiplexed connection (HTTP/2, HTTP/3): the
		// request shares the connection with the streams in flight, each
		// a flow of the path's beside its other connections; it does not
		// wait for them to drain.
		shared := pm
		shared.active = max(pm.active-1, 0) + float64(c.InFlight)
		return m.setupRTTs(false, false)*pm.rtt + shared.shared(size, pm.transfer(size, pm.window(c)))
	}
	wait, pm := pm.drain(float64(c.Pending), float64(c.WaitingBytes))
	wait += float64(c.Waiting) * pm.rtt
	return wait + m.setupRTTs(false, false)*pm.rtt + pm.shared(size, pm.transfer(size, pm.window(c)))
}

// MPTCP predicts the completion time of size bytes over a new Multipath TCP
// connection with its first subflow on first and one more on second, which
// joins one handshake after the first subflow is up; both slow-start and
// their rates add up.
func (m *Model) MPTCP(first, second *intents.Path, size int64, tls bool) time.Duration {
	a, b := m.path(first), m.path(second)
	startA := m.setupRTTs(true, tls) * a.rtt
	startB := max(startA, a.rtt+b.rtt)
	s := float64(size)
	done := func(t float64) bool { return a.bytesBy(t-startA, a.iw)+b.bytesBy(t-startB, b.iw) >= s }
	// Bisect between the first subflow's data and when it alone would be done.
	lo, hi := startA, startA+a.transfer(s, a.iw)
	if !done(lo) {
		for range 50 {
			mid := (lo + hi) / 2
			if done(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		lo = hi
	}
	// The backlog of both paths, shared as for one (see shared).
	both := pathModel{cap: a.cap + b.cap, pending: a.pending + b.pending, active: a.active + b.active}
	return seconds(startA + both.shared(s, lo-startA))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
