package estimate

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// op is one measurement a Path takes, drawn at random.
type op func(p *Path)

func randomOp(r *rand.Rand) op {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo)) * time.Millisecond }
	switch r.IntN(10) {
	case 0, 1:
		d := ms(5, 300)
		return func(p *Path) { p.AddRTT(d) }
	case 2:
		d := ms(5, 100)
		return func(p *Path) { p.AddMinRTT(d) }
	case 3:
		n, d := int64(1000+r.IntN(2_000_000)), ms(1, 2000)
		return func(p *Path) { p.AddDelivery(n, d) }
	case 4, 5:
		n, d := int64(1000+r.IntN(1_000_000)), ms(1, 3000)
		pathBytes := n + int64(r.IntN(100_000))
		return func(p *Path) { p.AddTransfer(n, pathBytes, d) }
	case 6:
		n, d, gap := int64(4000+r.IntN(10_000)), ms(1, 400), ms(0, 50)
		return func(p *Path) { p.AddFirstFlight(n, n, d, gap) }
	case 7:
		n, d := int64(1000+r.IntN(500_000)), ms(10, 2000)
		return func(p *Path) { p.AddCeiling(n, d) }
	case 8:
		lost, sent := uint64(r.IntN(5)), uint64(5+r.IntN(500))
		return func(p *Path) { p.AddLoss(lost, sent) }
	}
	d := ms(5, 300)
	return func(p *Path) { p.AddProbe(d) }
}

// withoutOrigin is s less what says whether it stands on an earlier
// process's measurements: all a restore may change.
func withoutOrigin(s Snapshot) Snapshot {
	s.Remembered, s.Age = false, 0
	return s
}

// A Path restored from another's State, through its file form, is that
// Path: the same Snapshot, and the same after every measurement both
// take from then on, across the windows' ages (the RTT's ten minutes,
// the rate's thirty seconds) and the probes' ring. Over many random
// histories, so that each field of the State is needed by some.
func TestRestoredGoesOnAsTheSaved(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		now := time.Unix(1_800_000_000, 0)
		clock := func() time.Time { return now }
		tick := func() {
			switch r.IntN(20) {
			case 0:
				now = now.Add(time.Duration(r.IntN(15)) * time.Minute)
			case 1, 2:
				now = now.Add(time.Duration(r.IntN(45)) * time.Second)
			default:
				now = now.Add(time.Duration(r.IntN(500)) * time.Millisecond)
			}
		}
		var prior time.Duration
		if seed%5 == 0 {
			prior = 40 * time.Millisecond
		}
		saved := New(prior, 0)
		saved.SetClock(clock)
		for range r.IntN(40) {
			randomOp(r)(saved)
			tick()
		}
		s, ok := saved.State()
		if !ok {
			continue
		}
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var read State
		require.NoError(t, json.Unmarshal(b, &read))
		read, ok = read.Check(now, 24*time.Hour)
		require.True(t, ok, "seed %d: %s", seed, b)
		restored := New(prior, 0)
		restored.SetClock(clock)
		restored.Restore(read)
		require.Equal(t, withoutOrigin(saved.Snapshot()), withoutOrigin(restored.Snapshot()), "seed %d, restored", seed)
		for i := range 40 {
			o := randomOp(r)
			o(saved)
			o(restored)
			require.Equal(t, withoutOrigin(saved.Snapshot()), withoutOrigin(restored.Snapshot()), "seed %d, measurement %d after the restore", seed, i)
			tick()
		}
	}
}

// A restored Path says what stands on the earlier process's measurements,
// and how old they are, until it takes its own.
func TestRestoredSaysWhatItStandsOn(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	saved := New(0, 0)
	saved.SetClock(func() time.Time { return now })
	saved.AddRTT(30 * time.Millisecond)
	now = now.Add(time.Hour)
	saved.AddTransfer(100_000, 0, 400*time.Millisecond) // held back: 2 Mbit/s shown
	s, ok := saved.State()
	require.True(t, ok)
	now = now.Add(time.Hour)

	p := New(0, 0)
	p.SetClock(func() time.Time { return now })
	p.Restore(s)
	snap := p.Snapshot()
	assert.True(t, snap.Remembered)
	assert.Equal(t, 2*time.Hour, snap.Age, "the older of the two parts")
	assert.True(t, snap.CapacityShown)
	p.AddRTT(20 * time.Millisecond)
	assert.Equal(t, time.Hour, p.Snapshot().Age, "the rates still stand on the old knowledge")
	assert.Equal(t, 30*time.Millisecond-10*time.Millisecond/8, p.Snapshot().RTT, "a sample of its own smoothed in, as the saved Path would")
	p.AddDelivery(10_000, 100*time.Millisecond)
	assert.False(t, p.Snapshot().Remembered, "both measured here")
	assert.Zero(t, p.Snapshot().Age)

	_, ok = New(0, 0).State()
	assert.False(t, ok, "nothing measured, nothing to keep")
	raced := New(0, 0)
	raced.MarkRaced()
	_, ok = raced.State()
	assert.False(t, ok, "a race alone says little")
	raced.AddRTT(20 * time.Millisecond)
	s, ok = raced.State()
	assert.True(t, ok && s.Raced, "with what it measured, it is kept")
	restored := New(0, 0)
	restored.Restore(s)
	assert.True(t, restored.Raced())
}

// Check keeps of a State what could be a Path's and is young enough,
// part by part: an RTT over a minute, a rate over 1 Tbit/s, filters out
// of order or from the future, a part older than the age given, are
// dropped; what is left says whether anything is.
func TestCheckDropsWhatNoPathMeasures(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	good := func() State {
		p := New(0, 0)
		p.SetClock(func() time.Time { return now })
		p.AddRTT(20 * time.Millisecond)
		p.AddTransfer(100_000, 0, 400*time.Millisecond)
		p.AddLoss(1, 100)
		p.MarkRaced()
		s, _ := p.State()
		return s
	}
	s, ok := good().Check(now, time.Hour)
	require.True(t, ok)
	require.Equal(t, good(), s, "a Path's own State is kept whole")

	rttGone := func(s State) bool { return s.Samples == 0 && s.MinRTT == nil && s.SRTT == 0 }
	rateGone := func(s State) bool { return s.MaxRate == nil && s.Rate == 0 && !s.Shown }
	for name, c := range map[string]struct {
		edit             func(s *State)
		rttDrop, rateDrp bool
	}{
		"an hour's RTT":              {func(s *State) { s.SRTT = time.Hour }, true, false},
		"a negative RTT variation":   {func(s *State) { s.RTTVar = -1 }, true, false},
		"an RTT without samples":     {func(s *State) { s.Samples = 0 }, true, false},
		"negative samples":           {func(s *State) { s.Samples = -3 }, true, false},
		"a minimum that is not best": {func(s *State) { s.MinRTT[0].Value = 2 * s.MinRTT[1].Value }, true, false},
		"a minimum out of order":     {func(s *State) { s.MinRTT[2].At = s.MinRTT[0].At.Add(-time.Second) }, true, false},
		"a minimum from the future":  {func(s *State) { s.MinRTT[2].At = now.Add(time.Hour) }, true, false},
		"two minimum samples":        {func(s *State) { s.MinRTT = s.MinRTT[:2] }, true, false},
		"nine probes": {func(s *State) {
			s.Probes = make([]time.Duration, 9)
			for i := range s.Probes {
				s.Probes[i] = time.Millisecond
			}
		}, true, false},
		"an RTT learnt two hours ago": {func(s *State) {
			s.RTTAt = now.Add(-2 * time.Hour)
			for i := range s.MinRTT {
				s.MinRTT[i].At = s.RTTAt
			}
		}, true, false},
		"a rate beyond any link":        {func(s *State) { s.MaxRate[0].Value = 1e15 }, false, true},
		"a rate that is not a number":   {func(s *State) { s.MaxRate[1].Value = nanValue() }, false, true},
		"a rate without its maximum":    {func(s *State) { s.MaxRate = nil }, false, true},
		"a maximum without a rate":      {func(s *State) { s.Rate = 0 }, false, true},
		"a rate learnt two hours ago":   {func(s *State) { s.RateAt = now.Add(-2 * time.Hour) }, false, true},
		"a rate learnt in the future":   {func(s *State) { s.RateAt = now.Add(time.Hour) }, false, true},
		"a maximum from the future":     {func(s *State) { s.MaxRate[2].At = now.Add(time.Hour) }, false, true},
		"a maximum that is not the max": {func(s *State) { s.MaxRate[0].Value = s.MaxRate[2].Value / 2 }, false, true},
	} {
		st := good()
		c.edit(&st)
		got, ok := st.Check(now, time.Hour)
		assert.Equal(t, c.rttDrop, rttGone(got), "%s: the RTT part", name)
		assert.Equal(t, c.rateDrp, rateGone(got), "%s: the rate part", name)
		assert.True(t, ok, "%s: the other part is left", name)
	}

	st := good()
	st.Lost = st.Sent + 1
	got, _ := st.Check(now, time.Hour)
	assert.Zero(t, got.Sent, "more lost than sent: no loss believed")
	got, ok = good().Check(now.Add(2*time.Hour), time.Hour)
	assert.False(t, ok, "all of it too old")
	assert.Equal(t, State{}, got, "nor the race and losses that went with it")
}

func nanValue() float64 {
	var zero float64
	return zero / zero
}
