//go:build linux

package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sockintents/intents/internal/pageload"
)

// papergridCells is the paper grid's fixed sample of the paper's full
// factorial (384 cells of interface 1 at 0.5–50 Mbit/s and 10–50 ms,
// interface 2 at 0.5–50 Mbit/s and 20–200 ms): 48 cells, each level of
// interface 1's rate in 8 of them and each level of the other three
// factors in 12, and every pair of the two rates but one in one to three
// (most in two). It leaves out the pairs of two 0.5 Mbit/s paths, whose
// loads take 25–60 s each and would double the sample's time. It holds
// the four cells where a weak path was seen to slow pages most (a good
// path beside a 0.5 or 5 Mbit/s one at 200 ms, and a 0.5 or 2 Mbit/s
// near path beside a fast far one); the other 44 were then chosen to
// balance the levels and their pairs (a fixed search, not redrawn: every
// run measures the same cells).
var papergridCells = []paperCellSpec{
	{0.5, 10, 20, 50}, {0.5, 20, 5, 200}, {0.5, 20, 20, 200}, {0.5, 20, 50, 20},
	{0.5, 20, 50, 100}, {0.5, 30, 5, 50}, {0.5, 30, 20, 20}, {0.5, 50, 50, 100},
	{2, 10, 0.5, 50}, {2, 10, 5, 50}, {2, 10, 5, 200}, {2, 20, 20, 100},
	{2, 20, 50, 100}, {2, 30, 0.5, 20}, {2, 50, 0.5, 20}, {2, 50, 20, 50},
	{6, 10, 50, 50}, {6, 20, 50, 200}, {6, 30, 0.5, 50}, {6, 30, 5, 20},
	{6, 30, 5, 100}, {6, 50, 0.5, 20}, {6, 50, 5, 50}, {6, 50, 20, 50},
	{12, 10, 0.5, 20}, {12, 10, 5, 200}, {12, 20, 20, 50}, {12, 20, 20, 100},
	{12, 30, 0.5, 50}, {12, 30, 50, 100}, {12, 50, 0.5, 100}, {12, 50, 50, 100},
	{20, 10, 5, 100}, {20, 10, 20, 200}, {20, 20, 0.5, 200}, {20, 20, 20, 20},
	{20, 20, 50, 20}, {20, 30, 0.5, 50}, {20, 30, 5, 20}, {20, 50, 50, 200},
	{50, 10, 5, 200}, {50, 10, 50, 20}, {50, 10, 50, 200}, {50, 30, 5, 100},
	{50, 30, 20, 20}, {50, 50, 0.5, 100}, {50, 50, 0.5, 200}, {50, 50, 20, 200},
}

// paperCellSpec is one cell of the paper's factorial: interface 1's rate
// (Mbit/s) and RTT (ms), interface 2's.
type paperCellSpec struct {
	rate1 float64
	rtt1  int
	rate2 float64
	rtt2  int
}

// papergrid2Cells is a second fixed sample of the paper's factorial, for
// checking on cells it was not made on that a change tuned on the paper
// grid holds: 48 cells drawn at random, once, from the 320 that are
// neither in papergridCells nor a pair of two 0.5 Mbit/s paths (the
// cells in the factorial's order, shuffled by math/rand/v2's PCG seeded
// 2026, 77: see drawSecondSample). Unlike the paper grid it is not
// balanced: it samples the factorial as it is.
var papergrid2Cells = []paperCellSpec{
	{0.5, 10, 50, 20}, {2, 50, 20, 100}, {0.5, 50, 50, 200}, {50, 50, 50, 100},
	{6, 30, 50, 100}, {12, 10, 5, 100}, {6, 20, 20, 20}, {2, 30, 50, 20},
	{20, 30, 50, 200}, {6, 30, 0.5, 100}, {6, 20, 0.5, 20}, {2, 20, 5, 200},
	{20, 50, 0.5, 200}, {2, 20, 20, 50}, {50, 30, 5, 50}, {12, 30, 0.5, 200},
	{2, 20, 20, 20}, {2, 30, 20, 100}, {6, 30, 5, 200}, {12, 20, 5, 100},
	{2, 50, 0.5, 200}, {50, 10, 0.5, 50}, {20, 10, 0.5, 50}, {6, 10, 5, 50},
	{2, 50, 20, 20}, {12, 30, 0.5, 100}, {12, 30, 20, 20}, {6, 20, 0.5, 50},
	{0.5, 20, 5, 100}, {12, 50, 5, 20}, {20, 30, 20, 20}, {20, 20, 0.5, 20},
	{2, 10, 0.5, 200}, {20, 50, 20, 200}, {50, 30, 5, 20}, {12, 10, 5, 50},
	{50, 20, 0.5, 200}, {50, 30, 0.5, 50}, {12, 30, 5, 200}, {50, 10, 20, 200},
	{2, 50, 0.5, 100}, {6, 50, 50, 200}, {2, 30, 20, 50}, {50, 30, 5, 200},
	{2, 20, 0.5, 200}, {12, 10, 20, 200}, {50, 30, 0.5, 100}, {0.5, 30, 5, 100},
}

// The paper grid's defaults (-scenario papergrid alone): the paper's
// large page and its page of small and large objects; the single paths,
// and EAF on a first visit (a new Manager and Transport for each load)
// and warm (one Manager and Transport for all of a cell's loads, after
// one unmeasured load; every load asks for URLs of its own, so no size is
// known); ten loads a cell, at which a twin of the better path is rarely
// clearly slower by chance (see printPaper).
const (
	papergridPages = "32x100KB,mixed1"
	papergridReps  = 10
)

var papergridContenders = []string{"path1", "path2", "eaf", "eaf-warm"}

// papergrid is the paper grid's scenarios, with the grids' queues and
// single paths left out where arithmetic rules them out (see leftOut).
func papergrid() []scenario { return paperScenarios(papergridCells) }

// paperScenarios are cells' scenarios, with the grids' queues and
// pruning.
func paperScenarios(cells []paperCellSpec) []scenario {
	g := make([]scenario, 0, len(cells))
	for _, c := range cells {
		sc := cell(c.rate1, c.rtt1, c.rate2, c.rtt2).withQueue(gridQueue)
		sc.Prune = true
		g = append(g, sc)
	}
	return g
}

// papergrid2 is the second sample's scenarios, set up as papergrid's.
func papergrid2() []scenario { return paperScenarios(papergrid2Cells) }

// gridcheck is a fixed eighth of the paper grid (every sixth of its
// cells: each level of interface 1's rate at least once, 0.5 Mbit/s and
// 12 Mbit/s twice), with the grid's queues and pruning: small enough to
// run serially at ten loads in minutes, for checking that a parallel run
// of the page loader agrees with serial ones (see agree).
func gridcheck() []scenario {
	g := papergrid()
	var out []scenario
	for i := 0; i < len(g); i += 6 {
		out = append(out, g[i])
	}
	return out
}

// pruneRatio is how many times longer than the other path's a single
// path's arithmetic load time must be for it to be left out of a cell
// (see leftOut).
const pruneRatio = 3

// leftOut returns the single-path contenders among contenders that cannot
// be the better path of the cell by arithmetic, if sc prunes: the page's
// lower bound on that path alone (its bytes at the path's rate and its
// round trips) over pruneRatio times the other path's. A load takes
// longer than its bound, but the faster path's bound is the further
// off (its round trips weigh more), so a path left out so was slower by
// far. A 0.5 Mbit/s path beside a fast one takes a minute for the large
// page and would double a grid's time.
func leftOut(sc scenario, w pageload.Workload, contenders []string) []string {
	if !sc.Prune || len(sc.Paths) != 2 {
		return nil
	}
	alone := aloneBounds(sc, w)
	var out []string
	for i, key := range baselines {
		if slices.Contains(contenders, key) && alone[i] > pruneRatio*alone[1-i] {
			out = append(out, key)
		}
	}
	return out
}

// aloneBounds is the page's lower bound on each of sc's two paths alone:
// its bytes at the path's rate, and its round trips.
func aloneBounds(sc scenario, w pageload.Workload) [2]time.Duration {
	var alone [2]time.Duration
	for i, p := range sc.Paths[:2] {
		alone[i] = w.LowerBound(p.RTT(), float64(p.Down.MeanRate()))
	}
	return alone
}

// The paper's second half: EAF was slower than the
// better interface in about 1.5 % of the paper's simulated cases. A cell
// counts as clearly slower than the better single path when the
// contender's median is over paperMargin times the better path's median
// and even its fastest load is slower than that median: slower, and not
// by one unlucky load among a few. The sample passes with at most
// paperShare of its cells clearly slower and none over paperWorst times
// the better path's median.
const (
	paperMargin = 1.05
	paperShare  = 0.02
	paperWorst  = 1.3
)

// paperCell is one cell's comparison of a contender with the better
// single path.
type paperCell struct {
	key           cellKey
	better        string  // the single path with the lower median
	ratio         float64 // the contender's median over the better path's
	fastest       float64 // its fastest load over the better path's median
	loads         int     // the contender's loads in the cell
	clearlySlower bool
}

// paperTally sums a contender's cells, with the rule's own noise: how a
// twin of each cell's better path (its loads drawn from that path's own,
// as goal's twin) fares under the same rule.
type paperTally struct {
	cells   []paperCell
	slower  int     // cells clearly slower
	over    int     // cells over paperWorst
	geomean float64 // of the ratios
	worst   float64 // the highest ratio
	// twinSlower is how many cells a twin of the better path is clearly
	// slower in, on average; twinPasses how often a twin passes the rule;
	// twinOver, twinGeomean and twinWorst its cells over paperWorst, its
	// geometric mean and its worst cell, on average over the draws.
	twinSlower, twinPasses           float64
	twinOver, twinGeomean, twinWorst float64
}

// geomeanOf is the geometric mean of t's ratios in the cells of page
// workload (0 if none).
func (t paperTally) geomeanOf(workload string) float64 {
	sum, n := 0.0, 0
	for _, c := range t.cells {
		if c.key.workload == workload {
			sum += math.Log(c.ratio)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return math.Exp(sum / float64(n))
}

// testPaper compares contender with the better single path in every cell
// that has the contender and a single path, in the cells' order; its
// twin's draws are seeded by the cells' places, so a report says the
// same each time it is made from the same loads.
func (r *results) testPaper(contender string) paperTally {
	var t paperTally
	singles := singlesOf(contender)
	if slices.Contains(singles, contender) {
		return t
	}
	type twinOf struct{ loads []time.Duration }
	var twins []twinOf
	logSum := 0.0
	for _, k := range r.cells {
		own, ok := r.by[k][contender]
		if !ok {
			continue
		}
		var better string
		for _, b := range singles {
			if s, ok := r.by[k][b]; ok && (better == "" || s.median < r.by[k][better].median) {
				better = b
			}
		}
		if better == "" {
			continue
		}
		m := r.by[k][better].median.Seconds()
		c := paperCell{key: k, better: better, ratio: own.median.Seconds() / m, fastest: own.min.Seconds() / m, loads: len(r.loads[k][contender])}
		c.clearlySlower = c.ratio > paperMargin && c.fastest > 1
		if c.clearlySlower {
			t.slower++
		}
		if c.ratio > paperWorst {
			t.over++
		}
		logSum += math.Log(c.ratio)
		t.worst = max(t.worst, c.ratio)
		t.cells = append(t.cells, c)
		twins = append(twins, twinOf{r.loads[k][better]})
	}
	if len(t.cells) == 0 {
		return t
	}
	t.geomean = math.Exp(logSum / float64(len(t.cells)))
	rng := rand.New(rand.NewPCG(uint64(len(t.cells)), 59))
	var a, b []time.Duration
	draw := func(dst, from []time.Duration) []time.Duration {
		dst = dst[:0]
		for range from {
			dst = append(dst, from[rng.IntN(len(from))])
		}
		slices.Sort(dst)
		return dst
	}
	const draws = 2000
	passed := 0
	for range draws {
		slower, over := 0, 0
		logSum, worst := 0.0, 0.0
		for _, tw := range twins {
			a, b = draw(a, tw.loads), draw(b, tw.loads)
			m := median(a).Seconds()
			ratio := median(b).Seconds() / m
			if ratio > paperMargin && b[0].Seconds() > m {
				slower++
			}
			if ratio > paperWorst {
				over++
			}
			logSum += math.Log(ratio)
			worst = max(worst, ratio)
		}
		t.twinSlower += float64(slower) / draws
		t.twinOver += float64(over) / draws
		t.twinGeomean += math.Exp(logSum/float64(len(twins))) / draws
		t.twinWorst += worst / draws
		if t.passes(slower, over) {
			passed++
		}
	}
	t.twinPasses = float64(passed) / draws
	return t
}

// passes reports whether slower cells clearly slower and over cells over
// paperWorst pass the rule, over t's cells.
func (t paperTally) passes(slower, over int) bool {
	return over == 0 && float64(slower) <= paperShare*float64(len(t.cells))
}

// printPaper writes, for a run of more than a few cells, each tested
// contender's count of cells clearly slower than the better single path,
// and for EAF its worst cells.
func (r *results) printPaper(w io.Writer, worst int) {
	if len(r.cells) < 4 {
		return
	}
	printed := false
	for _, c := range r.contenders {
		t := r.testPaper(c)
		if len(t.cells) == 0 {
			continue
		}
		if !printed {
			fmt.Fprintf(w, "\nThe paper's rule: clearly slower than the better single path (median over %.2f × its median, fastest load over its median) "+
				"in at most %.0f %% of cells, none over %.1f × (a twin is a copy of each cell's better path: the rule's own noise)\n",
				paperMargin, paperShare*100, paperWorst)
			printed = true
		}
		verdict := "passes"
		if !t.passes(t.slower, t.over) {
			verdict = "fails"
		}
		fmt.Fprintf(w, "%s: clearly slower in %d of %d cells (%.1f %%), over %.1f × in %d, geometric mean %.3f × the better path: %s; "+
			"a twin is clearly slower in %.2f cells on average and passes %.0f %% of the time\n",
			contenderNames[c], t.slower, len(t.cells), 100*float64(t.slower)/float64(len(t.cells)), paperWorst, t.over, t.geomean, verdict,
			t.twinSlower, t.twinPasses*100)
		if c != "eaf" || worst <= 0 {
			continue
		}
		cells := slices.Clone(t.cells)
		slices.SortStableFunc(cells, func(a, b paperCell) int { return cmp.Compare(b.ratio, a.ratio) })
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "worst cells\tpage\tbetter path\tEAF / better\tfastest / better\tclearly slower\t")
		for _, pc := range cells[:min(worst, len(cells))] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%s\t\n", pc.key.scenario, pc.key.workload, pc.better, pc.ratio, pc.fastest, yesNo(pc.clearlySlower))
		}
		tw.Flush()
		if cmds := t.confirmCommands(); len(cmds) > 0 {
			fmt.Fprintf(w, "a few loads a cell flag some cells by chance (the twin's count); confirm the clearly slower ones with %d loads each:\n  %s\n",
				confirmReps, strings.Join(cmds, "\n  "))
		}
	}
}

// printPaperSummary writes the paper's rule as one table: a row per
// tested contender (EAF on a first visit and warm, in a grid run), and a
// row for a twin of each cell's better path, the rule's own noise.
func (r *results) printPaperSummary(w io.Writer) {
	if len(r.cells) < 4 {
		return
	}
	var pages []string
	for _, k := range r.cells {
		if !slices.Contains(pages, k.workload) {
			pages = append(pages, k.workload)
		}
	}
	var twin paperTally
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	printed := false
	row := func(name string, slower, over, geomean, worst float64, t paperTally, byPage bool) {
		parts := make([]string, 0, len(pages))
		for _, p := range pages {
			if byPage {
				parts = append(parts, fmt.Sprintf("%s %.3f", p, t.geomeanOf(p)))
			}
		}
		fmt.Fprintf(tw, "%s\t%s of %d\t%s\t%.3f\t%s\t%.2f\t\n", name, trimFloat(slower), len(t.cells), trimFloat(over), geomean,
			strings.Join(parts, ", "), worst)
	}
	for _, c := range r.contenders {
		t := r.testPaper(c)
		if len(t.cells) == 0 {
			continue
		}
		if !printed {
			fmt.Fprintf(w, "\nSummary by the paper's rule (clearly slower: median over %.2f × the better path's, fastest load over its median)\n", paperMargin)
			fmt.Fprintln(tw, "contender\tclearly slower\tover 1.3 ×\tgeometric mean / better path\tby page\tworst cell\t")
			printed = true
		}
		row(contenderNames[c], float64(t.slower), float64(t.over), t.geomean, t.worst, t, true)
		if len(t.cells) > len(twin.cells) {
			twin = t // the twin of the contender with the most cells
		}
	}
	if printed {
		row("twin of the better path (its own loads redrawn; mean of draws)", twin.twinSlower, twin.twinOver, twin.twinGeomean, twin.twinWorst, twin, false)
		tw.Flush()
	}
}

// trimFloat writes an average count: whole counts without decimals.
func trimFloat(x float64) string {
	if x == math.Trunc(x) {
		return strconv.Itoa(int(x))
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// confirmReps is how many loads a cell gets when a screen's clearly
// slower cells are measured again: with ten, a twin's fastest load is
// over its original's median about once in a thousand draws, so a cell
// still clearly slower is slower.
const confirmReps = 10

// confirmCommands returns the page loader's arguments that measure t's
// clearly slower cells again with confirmReps loads each, against both
// single paths: one command a page, for its cells. None if no cell was
// clearly slower, or each already had that many loads.
func (t paperTally) confirmCommands() []string {
	var pages []string
	cells := map[string][]string{} // page: its scenarios
	for _, c := range t.cells {
		if !c.clearlySlower || c.loads >= confirmReps {
			continue
		}
		// A page's name spells its count with ×; the flag takes an x.
		page := strings.ReplaceAll(c.key.workload, "×", "x")
		if _, ok := cells[page]; !ok {
			pages = append(pages, page)
		}
		cells[page] = append(cells[page], c.key.scenario)
	}
	var cmds []string
	for _, page := range pages {
		cmds = append(cmds, fmt.Sprintf("pageload -scenario %s -workload %s -prune -queue %d -reps %d -contenders path1,path2,eaf",
			strings.Join(cells[page], ","), page, gridQueue, confirmReps))
	}
	return cmds
}

// paperRows are paper.csv's rows: every tested contender's cells.
func (r *results) paperRows() [][]string {
	rows := [][]string{{"scenario", "workload", "contender", "better_path", "median_over_better", "fastest_over_better", "clearly_slower"}}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, c := range r.contenders {
		for _, pc := range r.testPaper(c).cells {
			rows = append(rows, []string{pc.key.scenario, pc.key.workload, c, pc.better, f(pc.ratio), f(pc.fastest), strconv.FormatBool(pc.clearlySlower)})
		}
	}
	return rows
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
