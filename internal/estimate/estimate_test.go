package estimate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestUnknownUntilSampled(t *testing.T) {
	p := New(0, 0)
	s := p.Snapshot()
	assert.Zero(t, s.RTT)
	assert.Zero(t, s.MaxRate)
	assert.Zero(t, s.Samples)
	assert.Zero(t, s.FreeRate())

	p = New(30*time.Millisecond, 10e6)
	s = p.Snapshot()
	assert.Equal(t, 30*time.Millisecond, s.RTT, "the prior stands in")
	assert.Equal(t, 10e6, s.MaxRate)
	assert.Zero(t, s.Samples, "but is not a measurement")
}

func TestRTTSmoothing(t *testing.T) {
	p := New(0, 0)
	p.AddRTT(100 * time.Millisecond)
	s := p.Snapshot()
	assert.Equal(t, 100*time.Millisecond, s.RTT)
	assert.Equal(t, 50*time.Millisecond, s.RTTVar)
	p.AddRTT(20 * time.Millisecond)
	s = p.Snapshot()
	// RFC 6298: RTTVAR = 3/4·50 + 1/4·|100-20| = 57.5; SRTT = 7/8·100 + 1/8·20 = 90.
	assert.Equal(t, 90*time.Millisecond, s.RTT)
	assert.Equal(t, 57500*time.Microsecond, s.RTTVar)
	assert.Equal(t, 20*time.Millisecond, s.MinRTT)
	assert.Equal(t, 2, s.Samples)
}

func TestMinRTTMovesOnlyTheMinimum(t *testing.T) {
	p := New(0, 0)
	p.AddRTT(30 * time.Millisecond)
	p.AddMinRTT(20 * time.Millisecond)
	p.AddMinRTT(0) // unknown: no sample
	s := p.Snapshot()
	assert.Equal(t, 20*time.Millisecond, s.MinRTT)
	assert.Equal(t, 30*time.Millisecond, s.RTT, "a minimum is no sample of the RTT now")
	assert.Equal(t, 1, s.Samples)
}

func TestWindowedMinExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	p := New(0, 0)
	p.SetClock(func() time.Time { return now })
	p.AddRTT(10 * time.Millisecond)
	now = now.Add(time.Minute)
	p.AddRTT(50 * time.Millisecond)
	assert.Equal(t, 10*time.Millisecond, p.Snapshot().MinRTT, "within the window the minimum holds")
	now = now.Add(MinRTTWindow)
	p.AddRTT(40 * time.Millisecond)
	assert.Equal(t, 40*time.Millisecond, p.Snapshot().MinRTT, "after it, older minima are gone")
}

func TestWindowedMaxRateAndEWMA(t *testing.T) {
	now := time.Unix(1000, 0)
	p := New(0, 0)
	p.SetClock(func() time.Time { return now })
	p.AddDelivery(125000, 100*time.Millisecond) // 10 Mbit/s
	p.AddDelivery(62500, 100*time.Millisecond)  // 5 Mbit/s
	s := p.Snapshot()
	assert.InDelta(t, 10e6, s.MaxRate, 1)
	assert.InDelta(t, 0.75*10e6+0.25*5e6, s.Rate, 1)
	now = now.Add(MaxRateWindow + time.Second)
	p.AddDelivery(25000, 100*time.Millisecond) // 2 Mbit/s
	assert.InDelta(t, 2e6, p.Snapshot().MaxRate, 1, "the old maximum left the window")
}

func TestPriorCapacityIsAFloor(t *testing.T) {
	p := New(0, 20e6)
	p.AddDelivery(12500, 100*time.Millisecond) // 1 Mbit/s: a small transfer
	assert.Equal(t, 20e6, p.Snapshot().MaxRate)
	p.AddDelivery(500000, 100*time.Millisecond) // 40 Mbit/s
	assert.InDelta(t, 40e6, p.Snapshot().MaxRate, 1)
}

func TestFreeRate(t *testing.T) {
	s := Snapshot{MaxRate: 10e6, Rate: 5e6, Active: 2}
	// 10 / (2·5/10 + 1) = 5
	assert.InDelta(t, 5e6, s.FreeRate(), 1)
	s.Active = 0
	assert.InDelta(t, 10e6, s.FreeRate(), 1)
}

func TestActiveAndLoss(t *testing.T) {
	p := New(0, 0)
	p.AddActive(2)
	p.AddActive(-1)
	p.AddActive(-5)
	assert.Zero(t, p.Snapshot().Active, "never negative")
	p.AddLoss(1, 100)
	p.AddLoss(3, 100)
	assert.InDelta(t, 0.02, p.Snapshot().Loss, 1e-9)
}

func TestProbesAndPending(t *testing.T) {
	p := New(0, 0)
	assert.Zero(t, p.Snapshot().ProbeRTT)
	for _, ms := range []int{30, 10, 20, 500, 25} {
		p.AddProbe(time.Duration(ms) * time.Millisecond)
	}
	s := p.Snapshot()
	assert.Equal(t, 25*time.Millisecond, s.ProbeRTT, "the median shrugs off an outlier")
	assert.Equal(t, 5, s.Samples, "probes are RTT samples too")
	for range probeHistory {
		p.AddProbe(40 * time.Millisecond)
	}
	assert.Equal(t, 40*time.Millisecond, p.Snapshot().ProbeRTT, "only the recent probes count")
	p.AddPending(1000)
	p.AddPending(-300)
	assert.EqualValues(t, 700, p.Snapshot().Pending)
	p.AddPending(-5000)
	assert.Zero(t, p.Snapshot().Pending)
}

func TestTransferShowsCapacityOnlyWhenThePathHeldItBack(t *testing.T) {
	p := New(0, 0)
	p.AddTransfer(100_000, 0, 400*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "without an RTT nothing tells")
	p.AddRTT(20 * time.Millisecond)
	// 100 kB: slow start needs 3 rounds, 2 after the first byte (40 ms).
	p.AddTransfer(100_000, 0, 50*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "quick enough for slow start alone: a floor")
	p.AddTransfer(10_000, 0, time.Microsecond)
	assert.InDelta(t, 16e6, p.Snapshot().MaxRate, 1, "one window in a burst at the sender's pace is no rate sample")
	assert.False(t, p.Snapshot().CapacityShown)
	p.AddTransfer(100_000, 0, 400*time.Millisecond)
	s := p.Snapshot()
	assert.True(t, s.CapacityShown, "ten times slow start's time: the path held it back")
	assert.InDelta(t, 16e6, s.MaxRate, 1, "the fastest sample, 100 kB in 50 ms")
	assert.True(t, New(0, 5e6).Snapshot().CapacityShown, "a configured capacity counts as known")
}

// A transfer that arrives in less than a round trip was queued before it
// (a cellular link's stall released at once): its rate is timed over one
// minimum RTT, not the burst's few milliseconds.
func TestTransferQuickerThanARoundTripIsTimedOverOne(t *testing.T) {
	p := New(0, 0)
	p.AddRTT(50 * time.Millisecond)
	p.AddTransfer(100_000, 0, 12*time.Millisecond)
	assert.InDelta(t, 16e6, p.Snapshot().MaxRate, 1, "100 kB over 50 ms, not over 12")
	p.AddTransfer(100_000, 0, 80*time.Millisecond)
	assert.InDelta(t, 16e6, p.Snapshot().MaxRate, 1, "a slower one beside it changes nothing")
	q := New(0, 0)
	q.AddTransfer(100_000, 0, 12*time.Millisecond)
	assert.InDelta(t, 100_000*8/0.012, q.Snapshot().MaxRate, 1, "without an RTT there is nothing to time it over")
}

func TestTransfersBesideEachOtherSampleThePathsRate(t *testing.T) {
	p := New(0, 0)
	start := p.Delivered(0)
	// Two transfers of 100 kB share the path for 400 ms: each one's own
	// rate is half the path's.
	for range 2 {
		p.Delivered(100_000)
	}
	p.AddTransfer(100_000, p.Delivered(0)-start, 400*time.Millisecond)
	assert.InDelta(t, 4e6, p.Snapshot().MaxRate, 1, "200 kB in 400 ms, not 100 kB")
}

// A burst of less than an initial window shows the path's capacity only
// where it arrived slower than a sender paces its first window (half of
// 2.89 windows per RTT): then the path's bottleneck spread it. And not
// one spread over more than ten minimum RTTs, unless at 250 kbit/s or
// more.
func TestBurstShowsCapacityOnlyWhenSlowerThanTheSendersPace(t *testing.T) {
	p := New(0, 0)
	p.AddTransfer(10_000, 0, 40*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "without an RTT nothing tells")
	p.AddRTT(50 * time.Millisecond)
	// The pace of the first window on a 50 ms path: 1.445 · 14480 B /
	// 50 ms = 418 kB/s, 3.35 Mbit/s.
	p.AddTransfer(10_000, 0, 20*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "4 Mbit/s: as fast as the sender paces, a floor")
	assert.Zero(t, p.Snapshot().MaxRate, "and no rate sample")
	p.AddTransfer(4000, 0, 100*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "too few segments to time")
	p.AddTransfer(10_000, 0, 40*time.Millisecond)
	s := p.Snapshot()
	assert.True(t, s.CapacityShown, "2 Mbit/s: the path spread the burst")
	assert.InDelta(t, 2e6, s.MaxRate, 1)

	// Spread over more than ten minimum RTTs: a server that sent the body
	// in pieces, or a reader that paused, not a path of 160 kbit/s.
	r := New(0, 0)
	r.AddRTT(50 * time.Millisecond)
	r.AddTransfer(10_000, 0, 60*time.Second)
	r.AddTransfer(10_000, 0, 501*time.Millisecond)
	assert.False(t, r.Snapshot().CapacityShown, "a trickled body says nothing of the path")
	assert.Zero(t, r.Snapshot().MaxRate)
	r.AddTransfer(10_000, 0, 500*time.Millisecond)
	assert.True(t, r.Snapshot().CapacityShown, "ten RTTs: still the path's")
	assert.InDelta(t, 160e3, r.Snapshot().MaxRate, 1)

	// A 0.5 Mbit/s path at 10 ms spreads a 10 kB root over 16 of its
	// round trips: still the path's, at 250 kbit/s or more.
	slow := New(0, 0)
	slow.AddRTT(10 * time.Millisecond)
	slow.AddTransfer(10_000, 0, 330*time.Millisecond)
	assert.False(t, slow.Snapshot().CapacityShown, "242 kbit/s over 33 RTTs: trickled")
	slow.AddTransfer(10_000, 0, 160*time.Millisecond)
	assert.True(t, slow.Snapshot().CapacityShown, "0.5 Mbit/s over 16 RTTs: the path's")
	assert.InDelta(t, 500e3, slow.Snapshot().MaxRate, 1)

	// On a 10 ms path the sender paces a window at 16.7 Mbit/s: a burst at
	// 8 Mbit/s was held back by the path.
	q := New(0, 0)
	q.AddRTT(10 * time.Millisecond)
	q.AddTransfer(10_000, 0, 4*time.Millisecond)
	assert.False(t, q.Snapshot().CapacityShown, "20 Mbit/s")
	q.AddTransfer(10_000, 0, 10*time.Millisecond)
	assert.True(t, q.Snapshot().CapacityShown, "8 Mbit/s")
}

// A larger transfer's first flight is timed as a burst: on a 50 ms path a
// flight slower than the sender paces it shows the path's capacity, one at
// the sender's pace says nothing, and bytes beyond one window are not of
// the flight, nor a flight held back by a loss; and once the capacity is
// shown, a flight is not counted.
func TestFirstFlightShowsCapacityAsABurstDoes(t *testing.T) {
	p := New(0, 0)
	p.AddFirstFlight(13_000, 0, 52*time.Millisecond, 6*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "without an RTT nothing tells")
	p.AddRTT(50 * time.Millisecond)
	p.AddFirstFlight(13_000, 0, 10*time.Millisecond, time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "10.4 Mbit/s: the sender's pace, a floor")
	p.AddFirstFlight(20_000, 0, 80*time.Millisecond, 6*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "more than a window: a later round in it")
	p.AddFirstFlight(13_000, 0, 52*time.Millisecond, 25*time.Millisecond)
	assert.False(t, p.Snapshot().CapacityShown, "a gap of half an RTT: a lost segment held the rest back")
	p.AddFirstFlight(13_000, 0, 52*time.Millisecond, 6*time.Millisecond)
	s := p.Snapshot()
	assert.True(t, s.CapacityShown, "2 Mbit/s: the path spread the flight")
	assert.InDelta(t, 2e6, s.MaxRate, 1)
	p.AddFirstFlight(13_000, 0, 104*time.Millisecond, 6*time.Millisecond)
	assert.Equal(t, s.Rate, p.Snapshot().Rate, "once the capacity is shown, flights say no more")

	// 0.5 Mbit/s at 20 ms spaces a flight's segments 23 ms apart, more
	// than half the RTT: the path's, not a loss. A gap of twice the
	// spacing is a loss.
	slow := New(0, 0)
	slow.AddRTT(20 * time.Millisecond)
	slow.AddFirstFlight(13_000, 0, 254*time.Millisecond, 75*time.Millisecond)
	assert.False(t, slow.Snapshot().CapacityShown, "a gap of three segments' spacing: a loss")
	slow.AddFirstFlight(13_000, 0, 208*time.Millisecond, 24*time.Millisecond)
	assert.True(t, slow.Snapshot().CapacityShown, "evenly spread by a slow path")
	assert.InDelta(t, 0.5e6, slow.Snapshot().MaxRate, 1)
}
