//go:build linux

package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sockintents/intents/internal/pageload"
)

// Runs of the page loader agree on a contender when their verdicts on it
// match cell by cell: a run made another way (in parallel testbeds, say)
// can stand in for a serial one if it agrees with each serial run as well
// as runs made like the serial ones do (see agreeVerdict). A cell agrees
// when each run's ratio of the contender's median to the better single
// path's lies within the other run's 90 % bootstrap interval of it.

// agreeDraws is the bootstrap's resamples per cell and run.
const agreeDraws = 2000

// readRun reads a run's records back from the loads.csv in dir.
func readRun(dir string) ([]record, error) {
	f, err := os.Open(filepath.Join(dir, "loads.csv"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: empty", f.Name())
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, need := range []string{"scenario", "workload", "contender", "rep", "plt_s", "failed"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%s: no %s column", f.Name(), need)
		}
	}
	var recs []record
	for i, row := range rows[1:] {
		rep, err1 := strconv.Atoi(row[col["rep"]])
		plt, err2 := strconv.ParseFloat(row[col["plt_s"]], 64)
		if err1 != nil || err2 != nil || plt < 0 {
			return nil, fmt.Errorf("%s: row %d: bad rep or plt_s", f.Name(), i+2)
		}
		rec := record{Scenario: row[col["scenario"]], Workload: row[col["workload"]], Contender: row[col["contender"]],
			Rep: rep, PLT: time.Duration(math.Round(plt * float64(time.Second))), Failed: row[col["failed"]]}
		// The emulators' lateness, where the run recorded it.
		if i, ok := col["late_max_ms"]; ok {
			rec.LateMax = msDuration(row[i])
			rec.LateMean = msDuration(row[col["late_mean_ms"]])
			rec.Redone, _ = strconv.Atoi(row[col["redone"]])
			rec.KeptLate = row[col["kept_late"]] == "true"
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// msDuration reads a duration written by msField (0 if it is not one).
func msDuration(s string) time.Duration {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return time.Duration(math.Round(v * float64(time.Millisecond)))
}

// runResults rebuilds a run's results from its records: its cells in the
// order they came, each scenario and page parsed from its name.
func runResults(recs []record, traces string) (*results, error) {
	var scens []scenario
	var workloads []pageload.Workload
	var contenders []string
	for _, rec := range recs {
		if !slices.ContainsFunc(scens, func(sc scenario) bool { return sc.Name == rec.Scenario }) {
			p, err := parseScenarios(rec.Scenario, traces)
			if err != nil {
				return nil, err
			}
			sc := p[0]
			sc.Name = rec.Scenario
			scens = append(scens, sc)
		}
		if !slices.ContainsFunc(workloads, func(w pageload.Workload) bool { return w.Name == rec.Workload }) {
			// A page's name spells its count with ×; Parse takes an x.
			w, err := pageload.Parse(strings.ReplaceAll(rec.Workload, "×", "x"), 1)
			if err != nil {
				return nil, err
			}
			w.Name = rec.Workload
			workloads = append(workloads, w)
		}
		if !slices.Contains(contenders, rec.Contender) {
			contenders = append(contenders, rec.Contender)
		}
	}
	return newResults(scens, workloads, contenders, recs), nil
}

// ratioInterval is a cell's ratio of a contender's median to the better
// single path's, and its 90 % bootstrap interval (both loads redrawn).
type ratioInterval struct{ ratio, lo, hi float64 }

// intervals are contender's ratios in r's cells, by cell. The draws are
// seeded by the cell's name, so that every run's cell is drawn alike.
func (r *results) intervals(contender string) map[cellKey]ratioInterval {
	out := map[cellKey]ratioInterval{}
	for _, c := range r.testPaper(contender).cells {
		own, better := r.loads[c.key][contender], r.loads[c.key][c.better]
		var seed uint64
		for _, b := range []byte(c.key.scenario + "|" + c.key.workload) {
			seed = seed*131 + uint64(b)
		}
		redraw := medianRedraw(rand.New(rand.NewPCG(seed, 23)))
		ratios := make([]float64, agreeDraws)
		for i := range ratios {
			ratios[i] = redraw(own) / redraw(better)
		}
		slices.Sort(ratios)
		out[c.key] = ratioInterval{c.ratio, ratios[agreeDraws*5/100], ratios[agreeDraws*95/100-1]}
	}
	return out
}

// agreement is how well two runs agree on a contender: of the cells both
// have, how many agree (see above).
func agreement(a, b map[cellKey]ratioInterval) (agreeing, cells int) {
	for k, x := range a {
		y, ok := b[k]
		if !ok {
			continue
		}
		cells++
		if x.ratio >= y.lo && x.ratio <= y.hi && y.ratio >= x.lo && y.ratio <= x.hi {
			agreeing++
		}
	}
	return agreeing, cells
}

// runVerdict is one run's account of a contender: its cells' intervals
// and its count of cells clearly slower than the better path.
type runVerdict struct {
	name      string
	intervals map[cellKey]ratioInterval
	slower    int
}

// agreeVerdict tests the last of runs (the candidate) against the others
// (the references, at least two, made the same way as each other): it
// agrees with each reference in at least noise.share of the cells, and
// its count of clearly slower cells is off each reference's by at most
// noise.off. The noise is the references' own (see referenceNoise): two
// serial runs agree in only some of the cells, and a third serial run
// would pass a rule of "at least as well as the two agree" only about a
// third of the time (whichever of three like pairs agrees least).
type agreeVerdict struct {
	pairs  []agreePair
	noise  agreeNoise
	passes bool
}

// agreeNoise bounds how far runs made alike disagree: the least share of
// cells in which they agree, and the most their counts of clearly slower
// cells differ by.
type agreeNoise struct {
	share float64
	off   int
}

type agreePair struct {
	a, b             string
	agreeing, cells  int
	slowerA, slowerB int
	reference        bool // both are references
}

func judgeAgreement(runs []runVerdict, noise agreeNoise) agreeVerdict {
	v := agreeVerdict{noise: noise, passes: true}
	refs, cand := runs[:len(runs)-1], runs[len(runs)-1]
	for i := range refs {
		for _, other := range refs[i+1:] {
			n, cells := agreement(refs[i].intervals, other.intervals)
			v.pairs = append(v.pairs, agreePair{refs[i].name, other.name, n, cells, refs[i].slower, other.slower, true})
		}
	}
	for _, ref := range refs {
		n, cells := agreement(cand.intervals, ref.intervals)
		v.pairs = append(v.pairs, agreePair{cand.name, ref.name, n, cells, cand.slower, ref.slower, false})
		if share(n, cells) < noise.share || abs(cand.slower-ref.slower) > noise.off {
			v.passes = false
		}
	}
	return v
}

// referenceNoise is how far runs made like the references may disagree
// on contender: in the share of cells they agree in, two binomial
// standard errors below the least share two references agree in (a
// share of n cells is a count of n draws); in the counts of clearly
// slower cells, the most two references' counts differ by, or the
// standard deviation of the difference of two counts as large as theirs
// (Poisson: the square root of twice the count), whichever is more. By
// that model a third run made as the references were falls outside
// either bound in a few per cent of runs (a model, not a measurement,
// which would take many runs); with a few dozen cells the rule tells
// only gross disagreement.
func referenceNoise(refs []*results, contender string) agreeNoise {
	noise := agreeNoise{share: 1}
	cells, slower := 0, 0.0
	for i, a := range refs {
		sa := a.testPaper(contender).slower
		slower += float64(sa) / float64(len(refs))
		for _, b := range refs[i+1:] {
			n, of := agreement(a.intervals(contender), b.intervals(contender))
			noise.share = min(noise.share, share(n, of))
			noise.off = max(noise.off, abs(sa-b.testPaper(contender).slower))
			cells = max(cells, of)
		}
	}
	if cells > 0 {
		q := noise.share
		noise.share = max(0, q-2*math.Sqrt(q*(1-q)/float64(cells)))
	}
	noise.off = max(noise.off, int(math.Round(math.Sqrt(2*slower))))
	return noise
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func abs(x int) int { return max(x, -x) }

// agree reads the runs in dirs (references first, the candidate last)
// and writes, for each contender tested by the paper's rule in all of
// them, how well they agree, and whether the candidate agrees with the
// references as well as they agree with each other.
func agree(w io.Writer, dirs []string, traces string) error {
	if len(dirs) < 3 {
		return fmt.Errorf("-agree wants at least three runs: two references and the candidate, last")
	}
	var all []*results
	for _, d := range dirs {
		recs, err := readRun(d)
		if err != nil {
			return err
		}
		r, err := runResults(recs, traces)
		if err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
		all = append(all, r)
	}
	var tested []string
	for _, c := range all[0].contenders {
		if slices.ContainsFunc(all, func(r *results) bool { return len(r.testPaper(c).cells) == 0 }) {
			continue
		}
		tested = append(tested, c)
	}
	if len(tested) == 0 {
		return fmt.Errorf("no contender tested by the paper's rule in every run (each needs its single paths)")
	}
	for _, c := range tested {
		runs := make([]runVerdict, len(all))
		for i, r := range all {
			runs[i] = runVerdict{name: dirs[i], intervals: r.intervals(c), slower: r.testPaper(c).slower}
		}
		v := judgeAgreement(runs, referenceNoise(all[:len(all)-1], c))
		fmt.Fprintf(w, "\n%s: cells whose ratios to the better path lie within each other's 90 %% intervals, and cells clearly slower\n", contenderNames[c])
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "runs\tagree\tclearly slower\t")
		for _, p := range v.pairs {
			fmt.Fprintf(tw, "%s vs %s\t%d of %d\t%d, %d\t\n", p.a, p.b, p.agreeing, p.cells, p.slowerA, p.slowerB)
		}
		tw.Flush()
		verdict := "agrees with each reference within the references' own noise"
		if !v.passes {
			verdict = "disagrees with a reference beyond the references' own noise"
		}
		fmt.Fprintf(w, "%s %s: runs made like the references agree in at least %.0f %% of cells, their counts of clearly slower cells differ by at most %d\n",
			dirs[len(dirs)-1], verdict, v.noise.share*100, v.noise.off)
	}
	return nil
}
