//go:build linux

package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The browser's rule: a contender is slower than the better single path
// (the browser's own, over the same protocol) when the 90 % bootstrap
// interval of its median over that path's lies wholly above
// browserMargin. A twin of path 1 (browser-twin), measured as a contender
// of its own, shows what the rule makes of the machine's noise: it must
// pass wherever path 1 is the better path.
const browserMargin = 1.05

// browserGoals are how much less time than the better path EAF through
// the proxy must take on the paper's presets with the 32 × 100 kB page
// (the paper's Fig. 5 saw 25 to 50 % on the symmetric one).
var browserGoals = map[string]float64{"symmetric": 0.25, "asymmetric": 0.15}

// browserCell is a browser contender's comparison in one cell.
type browserCell struct {
	key       cellKey
	contender string
	better    string  // the single path with the lower median
	ratio     float64 // the contender's median over the better path's
	lo, hi    float64 // the ratio's 90 % bootstrap interval
}

// faster is how much less time the contender's median takes than the
// better path's, as a fraction (negative: more).
func (b browserCell) faster() float64 { return 1 - b.ratio }

// slower reports whether the cell breaks the browser's rule.
func (b browserCell) slower() bool { return b.lo > browserMargin }

// browserTests compares every browser contender but the single paths
// with its better single path in each cell that has both single paths.
// Draws are seeded by the cell's place, so a report made from the same
// loads says the same.
func (r *results) browserTests() []browserCell {
	var out []browserCell
	for i, k := range r.cells {
		for _, c := range r.contenders {
			singles := singlesOf(c)
			if !isBrowser(c) || slices.Contains(singles, c) || len(r.loads[k][c]) == 0 {
				continue
			}
			if b, ok := r.browserCompare(i, c, singles); ok {
				out = append(out, b)
			}
		}
	}
	return out
}

// roundRobinTests compares EAF, fresh and warm, with round robin over the
// same protocol to the proxy (the simplest way to use both paths), in
// each cell that has both.
func (r *results) roundRobinTests() []browserCell {
	var out []browserCell
	for i, k := range r.cells {
		for _, c := range r.contenders {
			rr, ok := roundRobinOf[c]
			if !ok || len(r.loads[k][c]) == 0 || len(r.loads[k][rr]) == 0 {
				continue
			}
			if b, ok := r.browserCompare(i, c, []string{rr}); ok {
				out = append(out, b)
			}
		}
	}
	return out
}

// roundRobinOf is the round robin each EAF browser contender is set against.
var roundRobinOf = map[string]string{"browser-eaf": "browser-rr", "browser-eaf-warm": "browser-rr", "browser-eaf-restart": "browser-rr",
	"browser-h2-eaf": "browser-h2-rr"}

// browserCompare compares contender c in the i'th cell with the better
// (lower median) of refs, all of which the cell must have: the ratio of
// the medians and its 90 % bootstrap interval, each draw against the
// better of the refs' redrawn medians.
func (r *results) browserCompare(i int, c string, refs []string) (browserCell, bool) {
	k := r.cells[i]
	b := browserCell{key: k, contender: c}
	for _, s := range refs {
		st, ok := r.by[k][s]
		if !ok {
			return b, false
		}
		if b.better == "" || st.median < r.by[k][b.better].median {
			b.better = s
		}
	}
	b.ratio = r.by[k][c].median.Seconds() / r.by[k][b.better].median.Seconds()
	redraw := medianRedraw(rand.New(rand.NewPCG(uint64(i), 23)))
	ratios := make([]float64, goalDraws)
	for n := range ratios {
		best := redraw(r.loads[k][refs[0]])
		for _, s := range refs[1:] {
			best = min(best, redraw(r.loads[k][s]))
		}
		ratios[n] = redraw(r.loads[k][c]) / best
	}
	slices.Sort(ratios)
	b.lo, b.hi = ratios[goalDraws*5/100], ratios[goalDraws*95/100-1]
	return b, true
}

// printBrowser writes the browser contenders' comparisons, cell by cell,
// and the goals of the presets' large page.
func (r *results) printBrowser(w io.Writer) {
	cells := r.browserTests()
	if len(cells) == 0 {
		return
	}
	fmt.Fprintf(w, "\nChromium through the proxy, against its better single path over the same protocol (90 %% bootstrap intervals; "+
		"slower: the interval wholly above %.2f; the twin is path 1 measured again)\n", browserMargin)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\tpage\tcontender\tbetter path\tmedian / better\t90 % interval\tfaster by\tslower\t")
	for _, b := range cells {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%.2f–%.2f\t%+.0f %%\t%s\t\n", b.key.scenario, b.key.workload, b.contender, b.better,
			b.ratio, b.lo, b.hi, b.faster()*100, yesNo(b.slower()))
	}
	tw.Flush()
	tally := map[string][2]int{}
	var order []string
	for _, b := range cells {
		t, ok := tally[b.contender]
		if !ok {
			order = append(order, b.contender)
		}
		t[0]++
		if b.slower() {
			t[1]++
		}
		tally[b.contender] = t
	}
	for _, c := range order {
		fmt.Fprintf(w, "%s: slower in %d of %d cells\n", contenderNames[c], tally[c][1], tally[c][0])
	}
	if rr := r.roundRobinTests(); len(rr) > 0 {
		fmt.Fprintf(w, "\nEAF against round robin through the proxy (each new connection on the next path), over the same protocol to the proxy "+
			"(slower: the 90 %% interval of the medians' ratio wholly above %.2f)\n", browserMargin)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "cell\tpage\tcontender\tmedian / round robin\t90 % interval\tslower\t")
		for _, b := range rr {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f–%.2f\t%s\t\n", b.key.scenario, b.key.workload, b.contender, b.ratio, b.lo, b.hi, yesNo(b.slower()))
		}
		tw.Flush()
	}
	for _, b := range cells {
		goal, ok := browserGoals[b.key.scenario]
		if !ok || (b.contender != "browser-eaf" && b.contender != "browser-h2-eaf") || !strings.HasPrefix(b.key.workload, "32×100KB") {
			continue
		}
		verdict := "met"
		if b.faster() < goal {
			verdict = "not met"
		}
		fmt.Fprintf(w, "goal, %s %s: %s at least %.0f %% faster than the better path: %+.0f %% (interval %+.0f to %+.0f %%): %s\n",
			b.key.scenario, b.key.workload, contenderNames[b.contender], goal*100, b.faster()*100, (1-b.hi)*100, (1-b.lo)*100, verdict)
	}
}

// browserRows are browser.csv's rows.
func (r *results) browserRows() [][]string {
	rows := [][]string{{"scenario", "workload", "contender", "better_path", "median_over_better", "interval_lo", "interval_hi", "slower"}}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, b := range r.browserTests() {
		rows = append(rows, []string{b.key.scenario, b.key.workload, b.contender, b.better, f(b.ratio), f(b.lo), f(b.hi), strconv.FormatBool(b.slower())})
	}
	return rows
}
