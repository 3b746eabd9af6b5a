//go:build linux

package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
)

// The smart-by-default goal's test of a contender (issue #17): in every
// cell its median load within 3 % of the best median of path 1 alone,
// path 2 alone and round robin, and its p90 within 10 % of their best p90.
// A few loads a cell make each comparison a reading, not a verdict: the
// best of three medians is itself an optimistic draw, and a cell's loads
// spread by a third where queues overflow. So beside each ratio the report
// gives a 90 % bootstrap interval (every contender's loads redrawn with
// replacement), and what a twin of the cell's best baseline, drawn from
// that baseline's own loads, would score: how often the test passes a
// contender that is exactly as good as the best, the test's own noise.

const (
	goalMedianMargin = 1.03
	goalP90Margin    = 1.10
	// goalDraws is the bootstrap's resamples per cell: the interval's ends
	// and the twin's pass rate then move by about a per cent between seeds.
	goalDraws = 4000
)

// goalBaselines are what the goal compares with.
var goalBaselines = []string{"path1", "path2", "rr"}

// goalCell is one cell's test of a contender.
type goalCell struct {
	key  cellKey
	best string // the baseline with the lowest median
	// ratio is the contender's median over the best baseline median, lo
	// and hi the 5th and 95th percentiles of that ratio over the draws.
	ratio, lo, hi float64
	p90Ratio      float64 // the contender's p90 over the best baseline p90
	// twin is the share of draws in which a twin of the best baseline
	// passes the median test.
	twin float64
}

// testGoal tests contender in every cell that has it and all three
// baselines, in the cells' order (newResults keeps the result in
// r.goals). Its draws are seeded by the cell's place in the run, so a
// report says the same each time it is made from the same loads.
func (r *results) testGoal(contender string) []goalCell {
	if slices.Contains(goalBaselines, contender) || isBrowser(contender) {
		return nil // a browser has baselines of its own (see browserTests)
	}
	var out []goalCell
	for i, k := range r.cells {
		own := r.loads[k][contender]
		if len(own) == 0 {
			continue
		}
		base := make([][]time.Duration, 0, len(goalBaselines))
		g := goalCell{key: k}
		var bestMedian, bestP90 time.Duration
		for _, b := range goalBaselines {
			s, ok := r.by[k][b]
			if !ok {
				break
			}
			base = append(base, r.loads[k][b])
			if bestMedian == 0 || s.median < bestMedian {
				bestMedian, g.best = s.median, b
			}
			if bestP90 == 0 || s.p90 < bestP90 {
				bestP90 = s.p90
			}
		}
		if len(base) < len(goalBaselines) {
			continue
		}
		s := r.by[k][contender]
		g.ratio = s.median.Seconds() / bestMedian.Seconds()
		g.p90Ratio = s.p90.Seconds() / bestP90.Seconds()
		twinOf := r.loads[k][g.best]

		redraw := medianRedraw(rand.New(rand.NewPCG(uint64(i), 17)))
		ratios := make([]float64, goalDraws)
		passed := 0
		for n := range ratios {
			best := redraw(base[0])
			for _, d := range base[1:] {
				best = min(best, redraw(d))
			}
			ratios[n] = redraw(own) / best
			if redraw(twinOf) <= goalMedianMargin*best {
				passed++
			}
		}
		slices.Sort(ratios)
		g.lo, g.hi = ratios[goalDraws*5/100], ratios[goalDraws*95/100-1]
		g.twin = float64(passed) / goalDraws
		out = append(out, g)
	}
	return out
}

// medianRedraw returns a function that draws len(d) loads from d with
// replacement, by rng, and returns their median in seconds: one
// bootstrap draw.
func medianRedraw(rng *rand.Rand) func(d []time.Duration) float64 {
	var buf []time.Duration
	return func(d []time.Duration) float64 {
		buf = buf[:0]
		for range d {
			buf = append(buf, d[rng.IntN(len(d))])
		}
		slices.Sort(buf)
		return median(buf).Seconds()
	}
}

// goalTally sums a contender's test over its cells.
type goalTally struct {
	cells       int
	within      int     // median within the margin
	surelyOut   int     // the interval's low end beyond the margin too
	p90Within   int     // p90 within its margin
	twinWithin  float64 // cells a twin of the best baseline passes, on average
	twinPassAll float64 // the chance a twin passes in every cell
}

func tallyGoal(cells []goalCell) goalTally {
	t := goalTally{cells: len(cells), twinPassAll: 1}
	for _, g := range cells {
		if g.ratio <= goalMedianMargin {
			t.within++
		}
		if g.lo > goalMedianMargin {
			t.surelyOut++
		}
		if g.p90Ratio <= goalP90Margin {
			t.p90Within++
		}
		t.twinWithin += g.twin
		t.twinPassAll *= g.twin // the cells' draws are independent
	}
	return t
}

func (t goalTally) String() string {
	return fmt.Sprintf("median within 3 %% in %d of %d cells (outside even at its interval's low end in %d), p90 within 10 %% in %d; "+
		"a twin of each cell's best baseline passes the median test in %.1f of %d on average, in all of them %.1f %% of the time",
		t.within, t.cells, t.surelyOut, t.p90Within, t.twinWithin, t.cells, t.twinPassAll*100)
}

// printGoal writes the headline contender's test cell by cell, and a line
// for every other contender tested, if the run has the baselines for it.
func (r *results) printGoal(w io.Writer) {
	printed := false
	for _, c := range r.contenders {
		cells := r.goals[c]
		if len(cells) == 0 {
			continue
		}
		if !printed {
			fmt.Fprintf(w, "\nThe goal: a median within 3 %% of the best of path 1, path 2 and round robin, a p90 within 10 %% of theirs "+
				"(90 %% bootstrap intervals; a twin is a contender exactly as good as the cell's best baseline: the test's own noise)\n")
			printed = true
		}
		if c == "eaf" {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "cell\tpage\tbest\tEAF / best\t90 % interval\tp90 / best p90\ta twin passes\t")
			for _, g := range cells {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f–%.2f\t%.2f\t%.0f %%\t\n", g.key.scenario, g.key.workload, g.best,
					g.ratio, g.lo, g.hi, g.p90Ratio, g.twin*100)
			}
			tw.Flush()
		}
		fmt.Fprintf(w, "%s: %v\n", contenderNames[c], tallyGoal(cells))
	}
}

// goalRows are goal.csv's rows: every tested contender's cells.
func (r *results) goalRows() [][]string {
	rows := [][]string{{"scenario", "workload", "contender", "best_baseline", "median_over_best", "interval_lo", "interval_hi", "p90_over_best_p90", "twin_passes"}}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, c := range r.contenders {
		for _, g := range r.goals[c] {
			rows = append(rows, []string{g.key.scenario, g.key.workload, c, g.best, f(g.ratio), f(g.lo), f(g.hi), f(g.p90Ratio), f(g.twin)})
		}
	}
	return rows
}
