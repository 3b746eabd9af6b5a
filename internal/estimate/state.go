package estimate

import (
	"math"
	"time"
)

// State is everything a Path's estimates stand on: a Path restored from
// it (Restore) gives the same Snapshot as the one it was taken of, and
// goes on from it as that one would with the same measurements (the
// smoothed RTT smooths the next sample in, a windowed maximum ages out
// when it would have). What is of the connections in progress (active
// connections, bytes pending, a probe under way, a silent path's mark)
// is not in it: they end with the process.
type State struct {
	// The RTT filters: RFC 6298's smoothed RTT and variation over
	// Samples samples, the last taken at RTTAt; the windowed minimum's
	// three samples (values in nanoseconds, best first); the last probes'
	// connect times, oldest first.
	SRTT    time.Duration   `json:"srtt_ns,omitempty"`
	RTTVar  time.Duration   `json:"rttvar_ns,omitempty"`
	Samples int             `json:"samples,omitempty"`
	RTTAt   time.Time       `json:"rtt_at,omitzero"`
	MinRTT  []Sample        `json:"min_rtt,omitempty"`
	Probes  []time.Duration `json:"probes_ns,omitempty"`
	// The rate filters: the delivery rate's moving average (bits/s), the
	// last sample taken at RateAt; the windowed maximum's three samples;
	// whether a transfer showed the path's capacity (else the maximum is
	// only a floor).
	Rate    float64   `json:"rate_bps,omitempty"`
	RateAt  time.Time `json:"rate_at,omitzero"`
	MaxRate []Sample  `json:"max_rate,omitempty"`
	Shown   bool      `json:"shown,omitempty"`
	// Lost and Sent are the segments the sampled connections lost and
	// sent.
	Lost uint64 `json:"lost,omitempty"`
	Sent uint64 `json:"sent,omitempty"`
	// Raced says a first request was raced over the path (see MarkRaced).
	Raced bool `json:"raced,omitempty"`
}

// Sample is one sample a windowed filter keeps.
type Sample struct {
	Value float64   `json:"v"`
	At    time.Time `json:"at"`
}

// State returns everything p's estimates stand on, and whether it holds
// any estimate (a Path nothing measured has nothing to keep).
func (p *Path) State() (State, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := State{SRTT: p.srtt, RTTVar: p.rttvar, Samples: p.samples, RTTAt: p.rttAt,
		MinRTT: p.minRTT.saved(), Rate: p.rate, RateAt: p.rateAt, MaxRate: p.maxRate.saved(), Shown: p.shown,
		Lost: p.lost, Sent: p.sent, Raced: p.raced}
	for i := max(p.nProbes-probeHistory, 0); i < p.nProbes; i++ {
		s.Probes = append(s.Probes, p.probes[i%probeHistory])
	}
	return s, s.worthKeeping()
}

// worthKeeping reports whether s holds estimates: losses or a race
// without them say little.
func (s State) worthKeeping() bool { return s.Samples > 0 || s.MinRTT != nil || s.MaxRate != nil }

// Restore sets p's estimates to s, as an earlier process left them (s
// as Check returned it): until p takes RTT or delivery samples of its
// own, its Snapshot says which stand on s, and how old they are. What is
// in progress on the path is kept.
func (p *Path) Restore(s State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.srtt, p.rttvar, p.samples, p.rttAt = s.SRTT, s.RTTVar, s.Samples, s.RTTAt
	p.minRTT.restore(s.MinRTT)
	p.nProbes = copy(p.probes[:], s.Probes)
	p.rate, p.rateAt, p.shown = s.Rate, s.RateAt, s.Shown
	p.maxRate.restore(s.MaxRate)
	_, p.rateKnown = p.maxRate.get()
	p.lost, p.sent, p.raced = s.Lost, s.Sent, s.Raced
	p.restoredRTT, p.restoredRate = s.Samples > 0, p.rateKnown
}

// MarkRaced notes that a first request was raced over the path: what the
// race showed is in the estimates, and a restored Path says so (Raced).
func (p *Path) MarkRaced() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.raced = true
}

// Raced reports whether the path's state was restored with Raced set: a
// first request was raced over it before, by an earlier process.
func (p *Path) Raced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raced
}

// Bounds of a State that is believed (see Check).
const (
	maxStateRTT  = time.Minute
	maxStateRate = 1e12 // bits/s: 1 Tbit/s
	// stateClockSkew is how far in the future a time may be: another
	// process's clock, or this one's stepped back.
	stateClockSkew = time.Minute
)

// Check returns of s (read from a file: maybe corrupt, maybe another
// program's) the parts taken no longer than maxAge before now, and
// whether anything is left. A value no measurement gives (an RTT over a
// minute, a rate over 1 Tbit/s, a negative one, filters out of order)
// makes its part unbelievable, and it is dropped too.
func (s State) Check(now time.Time, maxAge time.Duration) (State, bool) {
	fresh := func(at time.Time) bool {
		return !at.IsZero() && at.Before(now.Add(stateClockSkew)) && now.Sub(at) <= maxAge
	}
	notAhead := func(w []Sample) bool {
		for _, smp := range w {
			if smp.At.After(now.Add(stateClockSkew)) {
				return false
			}
		}
		return true
	}
	rttAt := s.RTTAt
	if len(s.MinRTT) == windowSamples {
		rttAt = later(rttAt, s.MinRTT[windowSamples-1].At)
	}
	if !s.rttSane() || !fresh(rttAt) || !notAhead(s.MinRTT) {
		s.SRTT, s.RTTVar, s.Samples, s.RTTAt, s.MinRTT, s.Probes = 0, 0, 0, time.Time{}, nil, nil
	}
	rateAt := s.RateAt
	if !s.rateSane() || !fresh(rateAt) || !notAhead(s.MaxRate) {
		s.Rate, s.RateAt, s.MaxRate, s.Shown = 0, time.Time{}, nil, false
	}
	if s.Lost > s.Sent {
		s.Lost, s.Sent = 0, 0
	}
	if !s.worthKeeping() {
		return State{}, false
	}
	return s, true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// rttSane reports whether s's RTT filters could be a Path's.
func (s State) rttSane() bool {
	rtt := func(d time.Duration) bool { return d > 0 && d <= maxStateRTT }
	if s.Samples < 0 || len(s.Probes) > probeHistory || !windowSane(s.MinRTT, float64(maxStateRTT), less) {
		return false
	}
	if s.Samples == 0 && (s.SRTT != 0 || s.RTTVar != 0) || s.Samples > 0 && (!rtt(s.SRTT) || s.RTTVar < 0 || s.RTTVar > maxStateRTT) {
		return false
	}
	for _, d := range s.Probes {
		if !rtt(d) {
			return false
		}
	}
	return true
}

// rateSane reports whether s's rate filters could be a Path's: a rate
// comes with its maximum, a capacity shown with both.
func (s State) rateSane() bool {
	if !windowSane(s.MaxRate, maxStateRate, greater) || !(s.Rate >= 0 && s.Rate <= maxStateRate) {
		return false
	}
	if s.MaxRate == nil {
		return s.Rate == 0 && !s.Shown && s.RateAt.IsZero()
	}
	return s.Rate > 0
}

// windowSane reports whether w is no samples, or a windowed filter's
// three: values in (0, bound], the best first, in the order taken.
func windowSane(w []Sample, bound float64, better func(a, b float64) bool) bool {
	if w == nil {
		return true
	}
	if len(w) != windowSamples {
		return false
	}
	for i, smp := range w {
		if !(smp.Value > 0 && smp.Value <= bound) || math.IsNaN(smp.Value) || smp.At.IsZero() {
			return false
		}
		if i > 0 && (!better(w[i-1].Value, smp.Value) || smp.At.Before(w[i-1].At)) {
			return false
		}
	}
	return true
}
