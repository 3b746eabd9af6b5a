//go:build linux

package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/sockintents/intents/internal/pageload"
)

// cellKey is one scenario and workload.
type cellKey struct{ scenario, workload string }

// stats summarise one contender's loads in one cell.
type stats struct {
	median, min, p90, max time.Duration
	loads                 int
	paths                 map[string]int // objects per path, over all loads
	// loads in which the server had a retransmission timeout
	timedOut int
}

// failure is a contender's failed loads in a cell: how many, and the
// first one's error.
type failure struct {
	loads int
	first string
}

type results struct {
	// connsPerHost is the contenders' limit, if -conns set one (0: a
	// browser's).
	connsPerHost int
	// hosts is -hosts, the servers the handcrafted pages are spread over
	// (0 or 1: one).
	hosts      int
	cells      []cellKey
	contenders []string
	records    []record
	by         map[cellKey]map[string]stats
	loads      map[cellKey]map[string][]time.Duration // each contender's load times, sorted
	// failed are the loads that ended in an error: apart from the times
	// above, so that no failure counts as a fast load.
	failed map[cellKey]map[string]failure
	goals  map[string][]goalCell // each tested contender's cells (see testGoal)
	bound  map[cellKey]time.Duration
	// fluid is the single paths' own loads combined (see fluidSplit); 0
	// without both.
	fluid   map[cellKey]time.Duration
	rttPart map[cellKey][]time.Duration // each path's share of the bound with no bytes to send, by cell
	queue   map[string]float64          // queue depth in BDPs, by scenario
	bytes   map[string]int64            // workload bytes, by name
	// leftOut are the single paths not run in a cell, and why (see
	// leftOut): the path's arithmetic load time, and the other's.
	leftOut map[cellKey][]leftOutPath
	// lowered is what a parallel run said when it moved its
	// parallelism (see parallelism.count).
	lowered []string
}

// leftOutPath is a single path left out of a cell by arithmetic.
type leftOutPath struct {
	contender     string
	alone, others time.Duration // the page's lower bound on it, and on the other path
}

func newResults(scens []scenario, workloads []pageload.Workload, contenders []string, records []record) *results {
	r := &results{contenders: contenders, records: records, by: map[cellKey]map[string]stats{},
		bound: map[cellKey]time.Duration{}, fluid: map[cellKey]time.Duration{}, rttPart: map[cellKey][]time.Duration{}, queue: map[string]float64{}, bytes: map[string]int64{},
		leftOut: map[cellKey][]leftOutPath{}, failed: map[cellKey]map[string]failure{}}
	for _, sc := range scens {
		r.queue[sc.Name] = sc.queueBDP()
		rate, rtt := 0.0, sc.Paths[0].RTT()
		for _, p := range sc.Paths {
			rate += float64(p.Down.MeanRate())
			rtt = min(rtt, p.RTT())
		}
		for _, w := range workloads {
			k := cellKey{sc.Name, w.Name}
			r.cells = append(r.cells, k)
			r.bound[k] = w.LowerBound(rtt, rate)
			for _, p := range sc.Paths {
				r.rttPart[k] = append(r.rttPart[k], w.LowerBound(p.RTT(), math.Inf(1)))
			}
			r.bytes[w.Name] = w.Bytes()
			for _, c := range leftOut(sc, w, contenders) {
				i, alone := slices.Index(baselines, c), aloneBounds(sc, w)
				r.leftOut[k] = append(r.leftOut[k], leftOutPath{contender: c, alone: alone[i], others: alone[1-i]})
			}
		}
	}
	plts := map[cellKey]map[string][]time.Duration{}
	for _, rec := range records {
		k := cellKey{rec.Scenario, rec.Workload}
		if rec.Failed != "" {
			if r.failed[k] == nil {
				r.failed[k] = map[string]failure{}
			}
			f := r.failed[k][rec.Contender]
			if f.loads == 0 {
				f.first = rec.Failed
			}
			f.loads++
			r.failed[k][rec.Contender] = f
			continue
		}
		if plts[k] == nil {
			plts[k], r.by[k] = map[string][]time.Duration{}, map[string]stats{}
		}
		plts[k][rec.Contender] = append(plts[k][rec.Contender], rec.PLT)
		s := r.by[k][rec.Contender]
		if s.paths == nil {
			s.paths = map[string]int{}
		}
		for p, n := range rec.Paths {
			s.paths[p] += n
		}
		if rec.Timeouts > 0 {
			s.timedOut++
		}
		r.by[k][rec.Contender] = s
	}
	r.loads = plts
	for k, m := range plts {
		for c, d := range m {
			slices.Sort(d)
			s := r.by[k][c]
			s.median, s.min, s.p90, s.max, s.loads = median(d), d[0], percentile(d, 90), d[len(d)-1], len(d)
			r.by[k][c] = s
		}
	}
	for _, k := range r.cells {
		var alone []time.Duration
		for _, c := range baselines {
			if s, ok := r.by[k][c]; ok {
				alone = append(alone, s.median)
			}
		}
		if len(alone) == len(r.rttPart[k]) {
			r.fluid[k] = fluidSplit(alone, r.rttPart[k])
		}
	}
	// Once per contender: the draws take a few milliseconds a cell, and
	// the printed table and goal.csv both show them.
	r.goals = map[string][]goalCell{}
	for _, c := range contenders {
		if cells := r.testGoal(c); len(cells) > 0 {
			r.goals[c] = cells
		}
	}
	return r
}

// fluidSplit is what the paths would load a page in together if each
// carried a share of its bytes at the rate it carried them alone: the
// quickest of their round trips, and the transfer times alone[i] -
// rtts[i] combined as parallel resistances. The lower bound takes the
// links' rates; this takes what TCP made of them on their queues, so
// that a contender's distance from it is mostly the scheduling's. It is
// optimistic where a path alone spends its load mostly in slow start (a
// 200 ms path): a share of the page ramps up no faster. A path that was
// no slower than its round trips (0 or less left) makes no estimate.
func fluidSplit(alone, rtts []time.Duration) time.Duration {
	var inverse float64
	for i := range alone {
		xfer := (alone[i] - rtts[i]).Seconds()
		if xfer <= 0 {
			return 0
		}
		inverse += 1 / xfer
	}
	return slices.Min(rtts) + time.Duration(float64(time.Second)/inverse)
}

// median of sorted durations or numbers (the mean of the middle two for
// an even count).
func median[T time.Duration | float64](d []T) T {
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

// percentile of sorted durations, by the nearest rank: the worst loads,
// not only the typical one.
func percentile(d []time.Duration, p int) time.Duration {
	rank := (p*len(d) + 99) / 100 // ⌈p/100 · n⌉
	return d[max(rank, 1)-1]
}

// best is the better single interface's median in a cell for contender
// c (its own kind's: see singlesOf; 0 if neither ran).
func (r *results) best(k cellKey, c string) time.Duration {
	var b time.Duration
	for _, c := range singlesOf(c) {
		if s, ok := r.by[k][c]; ok && (b == 0 || s.median < b) {
			b = s.median
		}
	}
	return b
}

func pathList(m map[string]int) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s:%d", p, m[p]))
	}
	return strings.Join(parts, " ")
}

// connsLimit is the contenders' connections per host if -conns set other
// than a browser's, which the tables and loads.txt then say; else 0.
func (r *results) connsLimit() int {
	if r.connsPerHost == pageload.MaxConnsPerHost {
		return 0
	}
	return r.connsPerHost
}

// tableColumns explains the columns of printTables' tables, once.
const tableColumns = `
Each cell's table, a row per contender:
  median PLT, min, p90, max   page load times over its loads, in seconds
  vs better single            its median against the better of the two single paths' medians
  PLT / bound                 its median over the cell's lower bound (in the cell's heading)
  PLT / fluid                 its median over the time the paths' loads take, split as a fluid (n/a: not computed)
  loads with an RTO           loads during which the server's TCP hit a retransmission timeout
  failed loads                loads that did not complete (an error, or over the time allowed)
  objects per path            the objects each path carried, over all its loads
`

// printTables writes a table per cell and, for several cells, a summary of
// each contender's speedups.
func (r *results) printTables(w io.Writer) {
	fmt.Fprint(w, tableColumns)
	for _, k := range r.cells {
		fmt.Fprintf(w, "\n%s, %s (%d B), queues of %g BDP: lower bound %.2f s (Σ bytes / Σ rates + handshake and dependency round trips)",
			k.scenario, k.workload, r.bytes[k.workload], r.queue[k.scenario], r.bound[k].Seconds())
		if f := r.fluid[k]; f > 0 {
			fmt.Fprintf(w, "; the paths' loads alone split as a fluid %.2f s", f.Seconds())
		}
		if n := r.connsLimit(); n > 0 {
			fmt.Fprintf(w, "; %d connections per host", n)
		}
		if r.hosts > 1 {
			fmt.Fprintf(w, "; handcrafted pages over %d hosts", r.hosts)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "contender\tmedian PLT\tmin\tp90\tmax\tvs better single\tPLT / bound\tPLT / fluid\tloads with an RTO\tfailed loads\tobjects per path\t")
		for _, c := range r.contenders {
			s, ok := r.by[k][c]
			failed := r.failed[k][c].loads
			if !ok {
				if failed > 0 {
					fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\t\t%d of %d\t\t\n", contenderNames[c], failed, failed)
				}
				continue
			}
			vs := "n/a"
			if best := r.best(k, c); best > 0 {
				vs = fmt.Sprintf("%+.0f %%", (s.median.Seconds()/best.Seconds()-1)*100)
			}
			fluid := "n/a"
			if f := r.fluid[k]; f > 0 {
				fluid = fmt.Sprintf("%.2f", s.median.Seconds()/f.Seconds())
			}
			fmt.Fprintf(tw, "%s\t%.2f s\t%.2f s\t%.2f s\t%.2f s\t%s\t%.2f\t%s\t%d of %d\t%d of %d\t%s\t\n", contenderNames[c], s.median.Seconds(), s.min.Seconds(),
				s.p90.Seconds(), s.max.Seconds(), vs, s.median.Seconds()/r.bound[k].Seconds(), fluid, s.timedOut, s.loads, failed, s.loads+failed, pathList(s.paths))
		}
		tw.Flush()
		for _, c := range r.contenders {
			if f := r.failed[k][c]; f.loads > 0 {
				fmt.Fprintf(w, "  %s failed %d loads; the first: %s\n", contenderNames[c], f.loads, f.first)
			}
		}
		for _, l := range r.leftOut[k] {
			fmt.Fprintf(w, "  %s left out: by arithmetic at least %.2f s, over %d × the other path's %.2f s\n",
				contenderNames[l.contender], l.alone.Seconds(), pruneRatio, l.others.Seconds())
		}
	}
	r.printLateness(w)
	if len(r.cells) < 2 {
		return
	}
	fmt.Fprintf(w, "\nOver %d cells: median PLT of the better single interface / contender's (above 1: faster)\n", len(r.cells))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tmin\tmedian\tmax\tcells >5 % slower\t")
	for _, c := range r.contenders {
		sp := r.speedups(c)
		if len(sp) == 0 {
			continue
		}
		slower := 0
		for _, s := range sp {
			if s < 1/1.05 {
				slower++
			}
		}
		mid := sp[len(sp)/2]
		if len(sp)%2 == 0 {
			mid = (sp[len(sp)/2-1] + mid) / 2
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%d\t\n", contenderNames[c], sp[0], mid, sp[len(sp)-1], slower)
	}
	tw.Flush()
}

// printLateness writes how late the emulators ran during the run's
// loads, and how many loads were loaded again for it (see measureInTime).
func (r *results) printLateness(w io.Writer) {
	var redone, keptLate int
	var worst, meanSum time.Duration
	for _, rec := range r.records {
		redone += rec.Redone
		if rec.KeptLate {
			keptLate++
		}
		worst = max(worst, rec.LateMax)
		meanSum += rec.LateMean
	}
	if len(r.records) == 0 {
		return
	}
	fmt.Fprintf(w, "\nThe emulators' lateness: the latest packet of any load %v, a load's mean %v on average; %d tries of %d loads dropped and loaded again, %d kept although late",
		worst, meanSum/time.Duration(len(r.records)), redone, len(r.records), keptLate)
	if len(r.lowered) > 0 {
		fmt.Fprintf(w, "; %s", strings.Join(r.lowered, "; "))
	}
	fmt.Fprintln(w)
}

// speedups are, sorted, the better single interface's median PLT over
// contender c's, one per cell.
func (r *results) speedups(c string) []float64 {
	var out []float64
	for _, k := range r.cells {
		if s, ok := r.by[k][c]; ok && r.best(k, c) > 0 {
			out = append(out, r.best(k, c).Seconds()/s.median.Seconds())
		}
	}
	slices.Sort(out)
	return out
}

// write saves loads.csv, loads.txt, summary.csv, goal.csv (see goal),
// paper.csv (see testPaper), browser.csv (see browserTests),
// plt.svg and speedup-ecdf.svg (and PNGs of the plots) in dir.
func (r *results) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := r.writeBench(filepath.Join(dir, "loads.txt")); err != nil {
		return err
	}
	loads := [][]string{{"scenario", "workload", "contender", "rep", "plt_s", "bytes", "lower_bound_s", "objects_per_path", "server_retransmits", "server_timeouts", "moved", "split", "resumed", "queue_bdp", "failed", "late_max_ms", "late_mean_ms", "redone", "kept_late"}}
	for _, rec := range r.records {
		k := cellKey{rec.Scenario, rec.Workload}
		loads = append(loads, []string{rec.Scenario, rec.Workload, rec.Contender, strconv.Itoa(rec.Rep), secs(rec.PLT),
			strconv.FormatInt(rec.Bytes, 10), secs(r.bound[k]), pathList(rec.Paths),
			strconv.FormatInt(rec.Retransmits, 10), strconv.FormatInt(rec.Timeouts, 10),
			strconv.FormatInt(rec.Moved, 10), strconv.FormatInt(rec.Split, 10), strconv.FormatInt(rec.Resumed, 10), bdps(r.queue[rec.Scenario]), rec.Failed,
			msField(rec.LateMax), msField(rec.LateMean), strconv.Itoa(rec.Redone), strconv.FormatBool(rec.KeptLate)})
	}
	summary := [][]string{{"scenario", "workload", "contender", "loads", "median_s", "min_s", "p90_s", "max_s", "speedup_vs_better_single", "plt_over_bound", "loads_with_timeout", "queue_bdp", "plt_over_fluid", "loads_failed"}}
	for _, k := range r.cells {
		for _, c := range r.contenders {
			s, ok := r.by[k][c]
			if !ok {
				continue
			}
			speedup := ""
			if best := r.best(k, c); best > 0 {
				speedup = strconv.FormatFloat(best.Seconds()/s.median.Seconds(), 'f', 4, 64)
			}
			fluid := ""
			if f := r.fluid[k]; f > 0 {
				fluid = strconv.FormatFloat(s.median.Seconds()/f.Seconds(), 'f', 4, 64)
			}
			summary = append(summary, []string{k.scenario, k.workload, c, strconv.Itoa(s.loads), secs(s.median), secs(s.min), secs(s.p90), secs(s.max),
				speedup, strconv.FormatFloat(s.median.Seconds()/r.bound[k].Seconds(), 'f', 4, 64), strconv.Itoa(s.timedOut), bdps(r.queue[k.scenario]), fluid, strconv.Itoa(r.failed[k][c].loads)})
		}
	}
	for name, rows := range map[string][][]string{"loads.csv": loads, "summary.csv": summary, "goal.csv": r.goalRows(), "paper.csv": r.paperRows(), "browser.csv": r.browserRows()} {
		if err := writeCSV(filepath.Join(dir, name), rows); err != nil {
			return err
		}
	}
	return r.plot(dir)
}

// plot draws plt.svg and, over enough cells, speedup-ecdf.svg (and their
// PNGs) in dir.
func (r *results) plot(dir string) error {
	if err := r.plotPLT(filepath.Join(dir, "plt.svg")); err != nil {
		return err
	}
	if len(r.cells) < minECDFCells {
		return nil // a distribution over a few cells says nothing the tables do not
	}
	return r.plotECDF(filepath.Join(dir, "speedup-ecdf.svg"))
}

// writeBench saves the loads in the Go benchmark format, one result line
// per load, so that benchstat (golang.org/x/perf/cmd/benchstat) compares
// the runs of two builds taking turns cell by cell: medians, confidence
// intervals and a significance test (Mann-Whitney U), rather than ranges
// read by eye. Each line's name keys the cell
// (BenchmarkPageLoad/scenario=…/page=…/queue=…/contender=…, with
// /hosts=N before the contender if -hosts spread the pages over more than
// one, and /conns=N if -conns set a limit other than a browser's); its
// values are the page load time, its ratio to the cell's
// lower bound, and the server's retransmissions and timeouts.
func (r *results) writeBench(name string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "goos: %s\ngoarch: %s\npkg: github.com/sockintents/intents/examples/pageload\n", runtime.GOOS, runtime.GOARCH)
	// A page's name does not say -hosts or -conns: the load's name does
	// where they are not the defaults, so that benchstat (and turns, which
	// files a build's loads together) keeps such loads apart.
	var extra string
	if r.hosts > 1 {
		extra = "/hosts=" + strconv.Itoa(r.hosts)
	}
	if n := r.connsLimit(); n > 0 {
		extra += "/conns=" + strconv.Itoa(n)
	}
	for _, rec := range r.records {
		if rec.Failed != "" {
			continue // no time to compare; loads.csv and the tables count it
		}
		fmt.Fprintf(&b, "BenchmarkPageLoad/scenario=%s/page=%s/queue=%s%s/contender=%s 1 %d ns/op",
			benchKey(rec.Scenario), benchKey(rec.Workload), bdps(r.queue[rec.Scenario]), extra, benchKey(rec.Contender), rec.PLT.Nanoseconds())
		if bound := r.bound[cellKey{rec.Scenario, rec.Workload}]; bound > 0 { // no bound, no ratio: not a ratio of 0
			fmt.Fprintf(&b, " %.4f plt/bound", rec.PLT.Seconds()/bound.Seconds())
		}
		fmt.Fprintf(&b, " %d retransmits %d timeouts\n", rec.Retransmits, rec.Timeouts)
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}

// benchKey makes s a value in a benchmark name: a slash would start a new
// part of the name (cells are written 6M/20ms+5M/50ms), a space end it.
func benchKey(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '/':
			return ':'
		case unicode.IsSpace(r):
			return '_'
		}
		return r
	}, s)
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 4, 64) }

// msField writes d in milliseconds, to the microsecond, for a CSV field.
func msField(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func bdps(q float64) string { return strconv.FormatFloat(q, 'g', -1, 64) }

func writeCSV(name string, rows [][]string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// minECDFCells is the fewest cells the speedup's distribution is drawn
// for.
const minECDFCells = 8

// plotPLT draws the median PLT of every contender in every cell as grouped
// bars, each contender in a colour of its own, with each cell's lower
// bound beside them as a dashed outline; the legend stands to the right,
// so that the axis fits the bars.
func (r *results) plotPLT(name string) error {
	p := plot.New()
	p.Title.Text = "Page load time (median)"
	p.Y.Label.Text = "seconds"
	series := append(slices.Clone(r.contenders), "bound")
	width := vg.Points(min(60/float64(len(series)), 10))
	var labels []string
	for _, k := range r.cells {
		labels = append(labels, k.scenario+" "+k.workload)
	}
	legend := plot.NewLegend()
	var names []string
	for i, c := range series {
		vals := make(plotter.Values, len(r.cells))
		for j, k := range r.cells {
			if c == "bound" {
				vals[j] = r.bound[k].Seconds()
			} else {
				vals[j] = r.by[k][c].median.Seconds()
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = 0
		bars.Color = seriesColor(i)
		label := "lower bound"
		if c == "bound" {
			bars.Color = color.White
			bars.LineStyle = draw.LineStyle{Color: color.Black, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}}
		} else {
			label = contenderNames[c]
		}
		bars.Offset = width * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(bars)
		legend.Add(label, bars)
		names = append(names, label)
	}
	p.Y.Min = 0
	p.NominalX(labels...)
	if len(labels) > 3 {
		p.X.Tick.Label.Rotation = 0.6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -1, -0.5
	}
	return saveBothLegendRight(p, legend, names, vg.Length(max(6, 1.4*float64(len(r.cells))))*vg.Inch, 5*vg.Inch, name)
}

// seriesColor is the i-th of 16 colours that tell apart at a glance
// (Tableau's ten, then six of Paul Tol's), so that a run with every
// browser contender still tells its series apart.
func seriesColor(i int) color.Color { return seriesColors[i%len(seriesColors)] }

var seriesColors = []color.Color{
	rgb(0x4e79a7), rgb(0xf28e2b), rgb(0xe15759), rgb(0x76b7b2), rgb(0x59a14f),
	rgb(0xedc948), rgb(0xb07aa1), rgb(0xff9da7), rgb(0x9c755f), rgb(0xbab0ac),
	rgb(0x332288), rgb(0x117733), rgb(0x882255), rgb(0x999933), rgb(0x000000), rgb(0x44aa99),
}

func rgb(v uint32) color.Color {
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 0xff}
}

// saveBothLegendRight saves p and its legend (of labels) beside it, as
// name (SVG) and as the PNG of the same name.
func saveBothLegendRight(p *plot.Plot, legend plot.Legend, labels []string, w, h vg.Length, name string) error {
	var legendWidth vg.Length
	for _, l := range labels {
		legendWidth = max(legendWidth, legend.TextStyle.Width(l))
	}
	legendWidth += legend.ThumbnailWidth + legend.Padding + vg.Points(12)
	total := w + legendWidth
	render := func(c vg.CanvasSizer) {
		dc := draw.New(c)
		p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
		legend.Top, legend.Left = true, true
		legend.Draw(draw.Crop(dc, w, 0, 0, -vg.Points(20))) // the legend's strip, below the title's height
	}
	svg := vgsvg.New(total, h)
	render(svg)
	if err := writeCanvas(name, svg); err != nil {
		return err
	}
	png := vgimg.PngCanvas{Canvas: vgimg.New(total, h)}
	render(png)
	return writeCanvas(strings.TrimSuffix(name, ".svg")+".png", png)
}

// writeCanvas writes c to the file name.
func writeCanvas(name string, c io.WriterTo) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// saveBoth saves p as name (SVG) and as the PNG of the same name.
func saveBoth(p *plot.Plot, w, h vg.Length, name string) error {
	if err := p.Save(w, h, name); err != nil {
		return err
	}
	return p.Save(w, h, strings.TrimSuffix(name, ".svg")+".png")
}

// plotECDF draws, per non-baseline contender, the empirical distribution
// of its speedup over the better single interface across the cells.
func (r *results) plotECDF(name string) error {
	p := plot.New()
	p.Title.Text = "Speedup over the better single interface, across cells"
	p.X.Label.Text = "better single interface's median PLT / contender's"
	p.Y.Label.Text = "fraction of cells"
	for i, c := range r.contenders {
		if slices.Contains(singlesOf(c), c) {
			continue
		}
		sp := r.speedups(c)
		if len(sp) == 0 {
			continue
		}
		pts := plotter.XYs{{X: sp[0], Y: 0}}
		for j, s := range sp {
			pts = append(pts, plotter.XY{X: s, Y: float64(j+1) / float64(len(sp))})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.StepStyle = plotter.PostStep
		line.Color = seriesColor(i) // as in the bar plot
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(contenderNames[c], line)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Left, p.Legend.Top = true, true
	p.Y.Min, p.Y.Max = 0, 1.5   // room for the legend above the curves
	p.X.Min = min(p.X.Min, 0.9) // speedup 1, the better interface, in view
	return saveBoth(p, 6*vg.Inch, 4*vg.Inch, name)
}
