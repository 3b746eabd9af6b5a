package estimate

import "time"

// windowed keeps the best (lowest for a min filter, highest for a max
// filter) sample over a sliding time window, in constant space: the
// three-sample scheme of Kathleen Nichols used by BBR (Linux lib/minmax.c).
type windowed struct {
	window time.Duration
	better func(a, b float64) bool // a replaces b
	s      [windowSamples]sample
}

// windowSamples is how many samples a windowed filter keeps.
const windowSamples = 3

type sample struct {
	t time.Time
	v float64
}

func newWindowed(window time.Duration, better func(a, b float64) bool) windowed {
	return windowed{window: window, better: better}
}

func (w *windowed) get() (float64, bool) { return w.s[0].v, !w.s[0].t.IsZero() }

// saved is the filter's samples, best first (nil: none), for a State.
func (w *windowed) saved() []Sample {
	if w.s[0].t.IsZero() {
		return nil
	}
	out := make([]Sample, windowSamples)
	for i, smp := range w.s {
		out[i] = Sample{Value: smp.v, At: smp.t}
	}
	return out
}

// restore sets the filter's samples to those saved returned (checked by
// windowSane); nil empties it.
func (w *windowed) restore(saved []Sample) {
	w.s = [windowSamples]sample{}
	for i, smp := range saved[:min(len(saved), windowSamples)] {
		w.s[i] = sample{t: smp.At, v: smp.Value}
	}
}

// update adds v, measured at t, and returns the best over the window.
func (w *windowed) update(t time.Time, v float64) float64 {
	n := sample{t, v}
	if w.s[0].t.IsZero() || w.better(v, w.s[0].v) || t.Sub(w.s[2].t) > w.window {
		w.s = [windowSamples]sample{n, n, n} // a new best, or nothing left in the window
		return v
	}
	if w.better(v, w.s[1].v) {
		w.s[1], w.s[2] = n, n
	} else if w.better(v, w.s[2].v) {
		w.s[2] = n
	}
	// Age out the best if it left the window, keeping sub-window choices.
	dt := t.Sub(w.s[0].t)
	switch {
	case dt > w.window:
		w.s[0], w.s[1], w.s[2] = w.s[1], w.s[2], n
		if t.Sub(w.s[0].t) > w.window {
			w.s[0], w.s[1], w.s[2] = w.s[1], w.s[2], n
		}
	case w.s[1].t.Equal(w.s[0].t) && dt > w.window/4:
		w.s[1], w.s[2] = n, n
	case w.s[2].t.Equal(w.s[1].t) && dt > w.window/2:
		w.s[2] = n
	}
	return w.s[0].v
}

func less(a, b float64) bool    { return a <= b }
func greater(a, b float64) bool { return a >= b }
