//go:build linux

package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// estimateSample is an intents contender's view of one path during a
// load: what its Manager estimated, and what the Transport had received
// over the path, at time At from the load's start.
type estimateSample struct {
	At       time.Duration
	Path     string
	Capacity int64 // Estimate.Bandwidth, bits/s
	RTT      time.Duration
	Received int64 // the Transport's bytes received over the path
	// Unresponsive: the path was taken for silent (Estimate.Unresponsive).
	Unresponsive bool `json:",omitempty"`
}

// estimateEvery is how often a load's estimates are sampled.
const estimateEvery = 25 * time.Millisecond

// estimateWindow is the span over which a capacity estimate is held
// against the rate the path offered: short enough to follow a cellular
// link's swings, long enough to hold several of a page's transfers.
const estimateWindow = time.Second

// carriedMin is what a path must have received in a window for its
// estimate to be judged there: ten full packets, a transfer.
const carriedMin = 15_000

// offered is the rate path (of scenario sc, by index) offered between
// from and to after load rep's start: its trace's, from the position the
// load started at, or its fixed rate.
func offered(sc scenario, path, rep int, from, to time.Duration) float64 {
	down := sc.Paths[path].Down
	if down.Trace == nil {
		return float64(down.Rate)
	}
	at := down.TraceStart + time.Duration(rep)*traceStride
	return down.Trace.Rate(at+from, at+to)
}

// estimateError is one window's capacity estimate against the rate the
// path offered in it.
type estimateError struct {
	path              int
	estimate, offered float64 // bits/s
}

// estimateErrors cuts the loads of contender in scenario sc into windows
// of estimateWindow (the last one kept if at least a quarter of one) and
// returns, for every window in which a path carried data, the capacity
// estimate at its end against the rate the path offered in it.
func estimateErrors(sc scenario, recs []record, contender string) []estimateError {
	var out []estimateError
	for _, rec := range recs {
		if rec.Scenario != sc.Name || rec.Contender != contender || rec.Failed != "" {
			continue
		}
		for i := range sc.Paths {
			name := "p" + strconv.Itoa(i+1)
			var samples []estimateSample
			for _, s := range rec.Estimates {
				if s.Path == name {
					samples = append(samples, s)
				}
			}
			if len(samples) == 0 {
				continue
			}
			for from := time.Duration(0); from < rec.PLT; from += estimateWindow {
				to := min(from+estimateWindow, rec.PLT)
				if to-from < estimateWindow/4 {
					break
				}
				first, last, ok := window(samples, from, to)
				if !ok || last.Received-first.Received < carriedMin {
					continue
				}
				out = append(out, estimateError{path: i, estimate: float64(last.Capacity), offered: offered(sc, i, rec.Rep, from, to)})
			}
		}
	}
	return out
}

// window returns the samples at or nearest before from and to.
func window(samples []estimateSample, from, to time.Duration) (first, last estimateSample, ok bool) {
	i := slices.IndexFunc(samples, func(s estimateSample) bool { return s.At > from })
	j := slices.IndexFunc(samples, func(s estimateSample) bool { return s.At > to })
	if i == 0 || j == 0 {
		return first, last, false
	}
	if i < 0 {
		i = len(samples)
	}
	if j < 0 {
		j = len(samples)
	}
	return samples[i-1], samples[j-1], true
}

// medianRelError is the median of the windows' absolute errors over the
// path's mean rate, and the windows counted.
func medianRelError(errs []estimateError, path int, mean float64) (float64, int) {
	var rel []float64
	for _, e := range errs {
		if e.path == path {
			rel = append(rel, math.Abs(e.estimate-e.offered)/mean)
		}
	}
	if len(rel) == 0 {
		return 0, 0
	}
	slices.Sort(rel)
	return median(rel), len(rel)
}

// printEstimates writes, for each traced scenario, how far each intents
// contender's capacity estimate of each traced path was from what the
// trace offered (see estimateErrors).
func printEstimates(w io.Writer, scens []scenario, recs []record, contenders []string) {
	printed := false
	for _, sc := range scens {
		if !sc.traced() {
			continue
		}
		for i, p := range sc.Paths {
			if p.Down.Trace == nil {
				continue
			}
			for _, c := range contenders {
				errs := estimateErrors(sc, recs, c)
				m, n := medianRelError(errs, i, float64(p.Down.MeanRate()))
				if n == 0 {
					continue
				}
				if !printed {
					fmt.Fprintf(w, "\nCapacity estimates against the traces: median absolute error over %v windows in which the path carried data, in %% of the trace's mean rate\n", estimateWindow)
					printed = true
				}
				fmt.Fprintf(w, "  %s, path %d (%s, mean %.1f Mbit/s), %s: %.0f %% over %d windows\n",
					sc.Name, i+1, p.Down.Trace.Name, float64(p.Down.MeanRate())/1e6, contenderNames[c], 100*m, n)
			}
		}
	}
}

// mark is a span in which a contender took a path for silent, as its
// samples saw it (to estimateEvery).
type mark struct {
	path     string
	from, to time.Duration // from the load's start; to is the load's end if it lasted
}

// marks returns the spans of rec's samples in which a path was marked
// unresponsive.
func marks(rec record) []mark {
	var out []mark
	open := map[string]int{} // path: index in out of its open mark
	for _, s := range rec.Estimates {
		i, ok := open[s.Path]
		switch {
		case s.Unresponsive && !ok:
			open[s.Path] = len(out)
			out = append(out, mark{path: s.Path, from: s.At, to: s.At})
		case s.Unresponsive:
			out[i].to = s.At
		case ok:
			out[i].to = s.At
			delete(open, s.Path)
		}
	}
	return out
}

// printMarks writes, for each traced scenario and contender that took a
// path for silent, how often it did and how long the marks lasted.
func printMarks(w io.Writer, scens []scenario, recs []record, contenders []string) {
	printed := false
	for _, sc := range scens {
		if !sc.traced() {
			continue
		}
		for _, c := range contenders {
			byPath := map[string][]time.Duration{}
			loads := 0
			for _, rec := range recs {
				if rec.Scenario != sc.Name || rec.Contender != c || len(rec.Estimates) == 0 {
					continue
				}
				loads++
				for _, m := range marks(rec) {
					byPath[m.path] = append(byPath[m.path], m.to-m.from)
				}
			}
			for _, path := range slices.Sorted(maps.Keys(byPath)) {
				d := byPath[path]
				slices.Sort(d)
				if !printed {
					fmt.Fprintf(w, "\nPaths taken for silent (marked unresponsive) during the loads, as sampled every %v\n", estimateEvery)
					printed = true
				}
				fmt.Fprintf(w, "  %s, %s: %s marked %d times in %d loads, for %v (median) to %v\n",
					sc.Name, contenderNames[c], path, len(d), loads, d[len(d)/2], d[len(d)-1])
			}
		}
	}
}

// estimateRows are estimates.csv's rows: every sample, with the rate its
// path offered over the estimateWindow before it.
func estimateRows(scens []scenario, recs []record) [][]string {
	rows := [][]string{{"scenario", "workload", "contender", "rep", "t_s", "path", "capacity_bps", "rtt_ms", "received_bytes", "offered_bps", "unresponsive"}}
	byName := map[string]scenario{}
	for _, sc := range scens {
		byName[sc.Name] = sc
	}
	for _, rec := range recs {
		sc := byName[rec.Scenario]
		for _, s := range rec.Estimates {
			i, err := strconv.Atoi(strings.TrimPrefix(s.Path, "p"))
			if err != nil || i < 1 || i > len(sc.Paths) {
				continue
			}
			rows = append(rows, []string{rec.Scenario, rec.Workload, rec.Contender, strconv.Itoa(rec.Rep), secs(s.At), s.Path,
				strconv.FormatInt(s.Capacity, 10), strconv.FormatFloat(float64(s.RTT)/1e6, 'f', 2, 64), strconv.FormatInt(s.Received, 10),
				strconv.FormatFloat(offered(sc, i-1, rec.Rep, s.At-estimateWindow, s.At), 'f', 0, 64), strconv.FormatBool(s.Unresponsive)})
		}
	}
	return rows
}

// plotEstimates draws, for each traced scenario, contender's capacity
// estimates of each traced path during its loads of workload against the
// rate the trace offered, over the trace's time: each load is laid at the
// trace position it started at.
func plotEstimates(dir string, scens []scenario, recs []record, contender, workload string) error {
	n := 0
	for _, sc := range scens {
		if !sc.traced() {
			continue
		}
		n++
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: %s's capacity estimates against the traces (%s)", sc.Name, contenderNames[contender], workload)
		p.X.Label.Text = "trace position (s)"
		p.Y.Label.Text = "Mbit/s"
		color := 0
		for i, path := range sc.Paths {
			tr := path.Down.Trace
			if tr == nil {
				continue
			}
			var truths []plotter.XYs // one line a load
			var est plotter.XYs
			for _, rec := range recs {
				if rec.Scenario != sc.Name || rec.Contender != contender || rec.Workload != workload {
					continue
				}
				start := path.Down.TraceStart + time.Duration(rec.Rep)*traceStride
				const step = 100 * time.Millisecond
				var truth plotter.XYs
				for t := time.Duration(0); t < rec.PLT+step; t += step {
					truth = append(truth, plotter.XY{X: (start + t).Seconds(), Y: tr.Rate(start+t-step, start+t) / 1e6})
				}
				truths = append(truths, truth)
				for _, s := range rec.Estimates {
					if s.Path == "p"+strconv.Itoa(i+1) {
						est = append(est, plotter.XY{X: (start + s.At).Seconds(), Y: float64(s.Capacity) / 1e6})
					}
				}
			}
			if len(est) == 0 {
				continue
			}
			for j, truth := range truths {
				line, err := plotter.NewLine(truth)
				if err != nil {
					return err
				}
				line.Color = plotutil.Color(color)
				p.Add(line)
				if j == 0 {
					p.Legend.Add(fmt.Sprintf("path %d: %s offered (100 ms)", i+1, tr.Name), line)
				}
			}
			pts, err := plotter.NewScatter(est)
			if err != nil {
				return err
			}
			pts.Color = plotutil.Color(color)
			pts.Radius = vg.Points(1.5)
			p.Add(pts)
			p.Legend.Add(fmt.Sprintf("path %d: capacity estimate", i+1), pts)
			color++
		}
		p.Legend.Top = true
		p.Y.Min = 0
		if err := saveBoth(p, 10*vg.Inch, 4*vg.Inch, filepath.Join(dir, fmt.Sprintf("estimates-%d.svg", n))); err != nil {
			return err
		}
	}
	return nil
}

// writeEstimates writes estimates.csv and, for the first of contenders
// that samples estimates (EAF first), the plots of its estimates on
// workload's loads, in dir.
func writeEstimates(dir string, scens []scenario, recs []record, contenders []string, workload string) error {
	if err := writeCSV(filepath.Join(dir, "estimates.csv"), estimateRows(scens, recs)); err != nil {
		return err
	}
	order := slices.Clone(contenders)
	if i := slices.Index(order, "eaf"); i > 0 {
		order[0], order[i] = order[i], order[0]
	}
	for _, c := range order {
		if slices.ContainsFunc(recs, func(r record) bool { return r.Contender == c && len(r.Estimates) > 0 }) {
			return plotEstimates(dir, scens, recs, c, workload)
		}
	}
	return nil
}
