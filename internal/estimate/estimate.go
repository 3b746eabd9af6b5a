// Package estimate keeps per-path performance estimates from passive
// measurements: round-trip times (from connection set-up and TCP_INFO),
// delivered bytes over time, active connections and loss.
package estimate

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Windows of the filters.
const (
	MinRTTWindow  = 10 * time.Minute // as BBR's min_rtt, generously
	MaxRateWindow = 30 * time.Second // capacity changes faster than base RTT
)

// Snapshot is what is known about a path at one moment. Zero durations and
// rates are unknown.
type Snapshot struct {
	RTT     time.Duration // smoothed (RFC 6298 SRTT)
	RTTVar  time.Duration
	MinRTT  time.Duration // windowed minimum
	Rate    float64       // current delivery rate, bits/s (EWMA)
	MaxRate float64       // windowed maximum delivery rate, bits/s: the capacity seen
	// CapacityShown: some transfer was held back by the path (see
	// AddTransfer), or a prior was given, so MaxRate is its capacity; else
	// MaxRate is only a floor.
	CapacityShown bool
	Active        int     // connections with transfers in progress
	Loss          float64 // lost / sent segments of sampled connections, 0..1
	Samples       int     // RTT samples so far; 0 means RTT is only a prior
	Pending       int64   // bytes expected by transfers in progress
	// ProbeRTT is the median of the recent active probes' connect times
	// (zero without probes).
	ProbeRTT time.Duration
	// Unresponsive: the path carried nothing for a while with data owed
	// and did not answer a probe, and nothing has got through since.
	Unresponsive bool
	// Remembered: some of the above (the RTTs until this process has a
	// sample of its own, the rates until it has a delivery) stands on
	// what an earlier process measured (see Restore), Age ago (the older
	// of the two, where both do).
	Remembered bool
	Age        time.Duration
}

// FreeRate is the capacity share a new transfer can expect, the
// prototype's rule: max_rate / (active·rate/max_rate + 1).
func (s Snapshot) FreeRate() float64 {
	if s.MaxRate <= 0 {
		return 0
	}
	return s.MaxRate / (float64(s.Active)*s.Rate/s.MaxRate + 1)
}

// Path estimates one path. It is safe for concurrent use.
type Path struct {
	mu        sync.Mutex
	prior     Snapshot
	srtt      time.Duration
	rttvar    time.Duration
	samples   int
	minRTT    windowed
	rate      float64
	maxRate   windowed
	active    int
	lost      uint64
	sent      uint64
	now       func() time.Time
	rateKnown bool // a delivery sample exists
	shown     bool // a transfer showed the capacity
	pending   int64
	probes    [probeHistory]time.Duration
	nProbes   int
	delivered atomic.Int64
	probing   atomic.Bool // a probe of the path is under way
	silent    atomic.Bool // see Snapshot.Unresponsive
	raced     bool        // see State.Raced
	// rttAt and rateAt are when the last RTT and delivery samples were
	// taken; restoredRTT and restoredRate say they are an earlier
	// process's (see Restore), until this one takes its own.
	rttAt, rateAt             time.Time
	restoredRTT, restoredRate bool
}

// MarkUnresponsive marks the path as carrying nothing; it reports whether
// it was not marked yet.
func (p *Path) MarkUnresponsive() bool { return p.silent.CompareAndSwap(false, true) }

// ClearUnresponsive ends the mark: something got through.
func (p *Path) ClearUnresponsive() { p.silent.Store(false) }

// Unresponsive reports whether the path is marked as carrying nothing.
func (p *Path) Unresponsive() bool { return p.silent.Load() }

// StartProbe claims the path's one probe slot: false if a probe is under
// way. EndProbe gives it back.
func (p *Path) StartProbe() bool { return p.probing.CompareAndSwap(false, true) }

// EndProbe ends the probe StartProbe claimed.
func (p *Path) EndProbe() { p.probing.Store(false) }

// New returns a Path with priors: rtt and rate (bits/s) stand until
// measurements replace them (zero: unknown).
func New(rtt time.Duration, rate float64) *Path {
	return &Path{
		prior:   Snapshot{RTT: rtt, MinRTT: rtt, MaxRate: rate, Rate: 0, CapacityShown: rate > 0},
		minRTT:  newWindowed(MinRTTWindow, less),
		maxRate: newWindowed(MaxRateWindow, greater),
		now:     time.Now,
	}
}

// SetClock replaces time.Now, for tests.
func (p *Path) SetClock(now func() time.Time) { p.now = now }

// AddRTT adds a round-trip time sample (RFC 6298 smoothing: α = 1/8, β = 1/4).
func (p *Path) AddRTT(rtt time.Duration) {
	if rtt <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.samples == 0 {
		p.srtt, p.rttvar = rtt, rtt/2
	} else {
		diff := p.srtt - rtt
		if diff < 0 {
			diff = -diff
		}
		p.rttvar = (3*p.rttvar + diff) / 4
		p.srtt = (7*p.srtt + rtt) / 8
	}
	p.samples++
	p.rttAt, p.restoredRTT = p.now(), false
	p.minRTT.update(p.rttAt, float64(rtt))
}

// AddMinRTT adds a connection's own minimum RTT (the kernel's, over every
// acknowledgment it timed) to the windowed minimum alone: a minimum is no
// sample of the RTT now, so the smoothed RTT does not move.
func (p *Path) AddMinRTT(rtt time.Duration) {
	if rtt <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.minRTT.update(p.now(), float64(rtt))
}

// AddDelivery adds a delivery-rate sample: bytes delivered over d.
func (p *Path) AddDelivery(bytes int64, d time.Duration) {
	if bytes <= 0 || d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addDelivery(bytes, d)
}

func (p *Path) addDelivery(bytes int64, d time.Duration) {
	r := float64(bytes) * 8 / d.Seconds()
	if !p.rateKnown {
		p.rate, p.rateKnown = r, true
	} else {
		p.rate = 0.75*p.rate + 0.25*r
	}
	p.rateAt, p.restoredRate = p.now(), false
	p.maxRate.update(p.rateAt, r)
}

// InitialWindow is the sender's initial congestion window AddTransfer
// assumes: 10 segments of 1448 bytes (RFC 6928).
const InitialWindow = 10 * 1448

// AddTransfer adds a response body's delivery: bytes over d from its first
// byte on, while the path delivered pathBytes in all (this transfer's and
// those beside it: see Delivered). The rate sample is the path's, so that
// transfers sharing the path do not each report only their share. Unlike
// a plain delivery sample it can show the path's capacity: slow start
// from an initial window delivers bytes in ⌈log2(bytes/IW+1)⌉ rounds, the
// first of which came with the first byte; a transfer that took more than
// twice the remaining rounds at the minimum RTT was held back by the path.
// A quicker one was held back by the sender's window (small objects, long
// RTTs), so its rate only bounds the capacity from below. Its rate is
// timed over one minimum RTT at least: bytes that arrive quicker were
// held in a queue before (see below), and tell nothing of the rate the
// path sustains.
//
// A transfer of one initial window or less arrives in one burst, at the
// pace of the sender or of the path, whichever is slower: a sender
// without pacing sends it back to back, and Linux's BBR paces its first
// window at 2.89 windows per RTT. A burst that arrived slower than half
// that pace was spread by the path's bottleneck, as a packet train is:
// its rate is the path's capacity (a page's first response, a few
// kilobytes, tells a 2 Mbit/s path from a 20 Mbit/s one before the page's
// objects are placed). A quicker one says nothing: the sender's pace, or
// bytes buffered before the reader came, which only make a burst look
// faster than the path. Nor does one spread over more than maxBurstRTTs
// minimum RTTs at a rate below slowestBurst: a server that sends a small
// body in pieces (think time, a stream of events) or a caller that stops
// reading midway spreads it too, and the path would be taken for one of a
// few kbit/s. Bursts under minBurst are too few packets to time.
func (p *Path) AddTransfer(bytes, pathBytes int64, d time.Duration) {
	if d <= 0 {
		return
	}
	if bytes <= InitialWindow {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.addBurst(bytes, pathBytes, d, 0)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Over less than a round trip, what arrives was held before it: a
	// queue released after a radio link's stall delivers a transfer at
	// many times the link's rate (traced: 100 kB in 12 ms on a cellular
	// path offering 15 Mbit/s, held for 30 s as its capacity). The sender
	// cannot have sent it quicker than one round trip's window.
	minRTT, ok := p.minRTT.get()
	p.addDelivery(max(bytes, pathBytes), max(d, time.Duration(minRTT)))
	if !ok {
		return
	}
	rounds := math.Ceil(math.Log2(float64(bytes)/InitialWindow+1)) - 1
	if d.Seconds() > 2*rounds*time.Duration(minRTT).Seconds() {
		p.shown = true
	}
}

// AddFirstFlight adds the arrival of a larger transfer's first bytes,
// those that came in the sender's first flight (its initial window): bytes
// of them over d from the transfer's first byte on, while the path
// delivered pathBytes. They came in one burst, as a transfer of one
// initial window does (see AddTransfer), and tell the same: a path slower
// than the sender's pace shows its capacity before the transfer is done,
// and where the transfer's whole time cannot, its later rounds taking a
// round trip each whatever the path's rate (a 24 kB page on a 2 Mbit/s
// path at 50 ms takes 96 ms, no more than two rounds' time of twice the
// RTT would allow a window-limited transfer). bytes must be of the first
// flight only: one that came a round trip later would spread the burst
// by that round trip. Nor does a flight with a gap of half a minimum RTT
// or more between its bytes (gap, the longest), and over twice their
// mean spacing: a bottleneck spreads a flight evenly, and a lost segment
// holds the rest back for the round trip its retransmission takes. It
// counts only until the path's capacity is shown: it is the first sign
// of a slow path, and after that the transfers' own samples say more:
// timed on every response, flights on busy paths cost the one-host pages
// 0.5–1.5 %.
func (p *Path) AddFirstFlight(bytes, pathBytes int64, d, gap time.Duration) {
	if d <= 0 || bytes > InitialWindow {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.shown {
		p.addBurst(bytes, pathBytes, d, gap)
	}
}

// AddCeiling adds what a path that lost a race showed: bytes did not
// arrive within d of the earliest its sender could have begun them (the
// round trips of set-up and request, and of slow start's rounds, already
// taken off), so its capacity is below bytes over d. Where no transfer
// has shown the path's capacity, that bound stands as its capacity until
// one does: an overestimate, but of the right size where the only other
// guess is a value lent to every unknown path.
func (p *Path) AddCeiling(bytes int64, d time.Duration) {
	if bytes <= 0 || d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		return
	}
	p.addDelivery(bytes, d)
	p.shown = true
}

// mss is the segment payload AddTransfer and AddFirstFlight assume.
const mss = 1448

// minBurst is the smallest burst whose spread AddTransfer times: four
// segments.
const minBurst = 4 * mss

// maxBurstRTTs and slowestBurst bound the spread of a burst that shows a
// path's capacity: over at most ten minimum RTTs, or longer only at
// 250 kbit/s or more. The slowest path a 10 kB burst tells is then
// 160 kbit/s at 50 ms, 40 kbit/s at 200 ms, and 250 kbit/s on a short
// round trip: a 0.5 Mbit/s path at 10 ms spreads a page's 10 kB root over
// 14 of its round trips, and taken for a path of unknown capacity (lent
// the others', or 10 Mbit/s) it got a page's first objects, 100 kB each
// at 0.5 Mbit/s, while a 20 Mbit/s path beside it waited.
const (
	maxBurstRTTs = 10
	slowestBurst = 250e3 // bits/s
)

// burstPace is the fraction of an initial window per minimum RTT below
// which a burst's rate was the path's, not the sender's (see AddTransfer):
// half of BBR's startup gain of 2.89.
const burstPace = 2.89 / 2

// addBurst is AddTransfer for a transfer of one initial window or less,
// and AddFirstFlight with its longest gap (0: not timed). Under p.mu.
func (p *Path) addBurst(bytes, pathBytes int64, d, gap time.Duration) {
	if bytes < minBurst {
		return
	}
	v, ok := p.minRTT.get()
	if !ok {
		return
	}
	minRTT := time.Duration(v)
	// A lost segment holds the rest of the flight back for its
	// retransmission's round trip: a gap of half a minimum RTT or more,
	// unless the flight's segments came that far apart anyway (a slow
	// path spreads them so: 23 ms each at 0.5 Mbit/s, more than half of a
	// 20 ms round trip), where only a gap of twice their mean spacing is.
	spacing := time.Duration(float64(d) * mss / float64(bytes))
	if 2*gap >= minRTT && gap > 2*spacing {
		return
	}
	n := max(bytes, pathBytes)
	atSendersPace := float64(n)/d.Seconds() >= burstPace*InitialWindow/minRTT.Seconds()
	trickled := d > maxBurstRTTs*minRTT && float64(n)*8/d.Seconds() < slowestBurst
	if atSendersPace || trickled {
		return
	}
	p.addDelivery(n, d)
	p.shown = true
}

// Delivered counts n more bytes delivered on the path and returns the
// count so far; a transfer's AddTransfer takes the difference over its
// lifetime. It takes no lock: it is called on every read.
func (p *Path) Delivered(n int64) int64 { return p.delivered.Add(n) }

// AddActive changes the count of active connections by delta.
func (p *Path) AddActive(delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active = max(p.active+delta, 0)
}

// probeHistory is how many probe results the median is taken over.
const probeHistory = 8

// AddProbe records an active probe's connect time (it is an RTT sample too).
func (p *Path) AddProbe(rtt time.Duration) {
	if rtt <= 0 {
		return
	}
	p.AddRTT(rtt)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes[p.nProbes%probeHistory] = rtt
	p.nProbes++
}

// AddPending changes the bytes expected by transfers in progress.
func (p *Path) AddPending(delta int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = max(p.pending+delta, 0)
}

// AddLoss adds lost and sent segment counts of a connection's TCP_INFO
// since its last sample.
func (p *Path) AddLoss(lost, sent uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lost += lost
	p.sent += sent
}

// Snapshot returns the current estimates; priors fill what has not been
// measured.
func (p *Path) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.prior
	s.Active = p.active
	now := p.now()
	if p.restoredRTT {
		s.Remembered, s.Age = true, now.Sub(p.rttAt)
	}
	if p.restoredRate {
		s.Remembered, s.Age = true, max(s.Age, now.Sub(p.rateAt))
	}
	if p.samples > 0 {
		s.RTT, s.RTTVar, s.Samples = p.srtt, p.rttvar, p.samples
		if v, ok := p.minRTT.get(); ok {
			s.MinRTT = time.Duration(v)
		}
	}
	if p.rateKnown {
		s.Rate = p.rate
		// A configured capacity is a floor: light traffic never shows a
		// path's capacity, so measurements only raise it.
		if v, ok := p.maxRate.get(); ok {
			s.MaxRate = max(s.MaxRate, v)
		}
		s.CapacityShown = s.CapacityShown || p.shown
	}
	if p.sent > 0 {
		s.Loss = float64(p.lost) / float64(p.sent)
	}
	s.Pending = p.pending
	s.Unresponsive = p.silent.Load()
	if n := min(p.nProbes, probeHistory); n > 0 {
		probes := make([]time.Duration, n)
		copy(probes, p.probes[:n])
		slices.Sort(probes)
		s.ProbeRTT = probes[n/2]
	}
	return s
}
