//go:build linux

package main

import (
	"encoding/csv"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"

	"github.com/sockintents/intents/internal/pageload"
	"github.com/sockintents/intents/internal/testbed"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" { // the client half, inside the namespace
		client()
		os.Exit(0)
	}
	if os.Getenv(failoverEnv) != "" {
		failoverClient()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseScenarios(t *testing.T) {
	s, err := parseScenarios("symmetric,6M/20ms+0.5M/200ms", testTraces)
	require.NoError(t, err)
	require.Len(t, s, 2)
	assert.Equal(t, "6M/20ms+0.5M/200ms", s[1].Name)
	assert.EqualValues(t, 500_000, s[1].Paths[1].Down.Rate)
	assert.Equal(t, 200*time.Millisecond, s[1].Paths[1].RTT())
	g, err := parseScenarios("grid", testTraces)
	require.NoError(t, err)
	assert.Len(t, g, 6)
	for _, sc := range g {
		assert.Equal(t, float64(gridQueue), sc.queueBDP(), "%s: the grids' small pages get deeper queues", sc.Name)
	}
	assert.Equal(t, 1.0, s[0].queueBDP(), "the presets keep the testbed's default")
	p, err := parseScenarios("paper", testTraces)
	require.NoError(t, err)
	assert.Len(t, p, 6*4*4*4, "every combination of the paper's levels")
	q := s[1].withQueue(2) // 6 Mbit/s × 20 ms = 15 kB, 0.5 Mbit/s × 200 ms = 12.5 kB
	assert.Equal(t, 30_000, q.Paths[0].Down.Queue)
	assert.Equal(t, 25_000, q.Paths[1].Up.Queue)
	assert.Equal(t, testbed.MinQueue, s[1].withQueue(1).Paths[1].Down.Queue, "the testbed's floor")
	assert.Zero(t, s[1].Paths[0].Down.Queue, "withQueue leaves the scenario it was called on alone")
	assert.Equal(t, 1.0, s[1].queueBDP(), "the testbed's default")
	assert.Equal(t, 2.0, q.queueBDP())
	for _, bad := range []string{"", "fast", "6M/20ms", "6M+5M", "6M/20ms+5M/0ms", "x/20ms+5M/20ms",
		"6M/20ms+50ms/trace:", "6M/20ms+0ms/trace:Verizon-LTE-short", "6M/20ms+50ms/trace:no-such-trace"} {
		_, err := parseScenarios(bad, testTraces)
		assert.Error(t, err, "%q", bad)
	}
}

// testTraces is the project's traces seen from this package's folder.
const testTraces = "../../../shared/traces"

func TestParseTracedScenarios(t *testing.T) {
	if _, err := os.Stat(testTraces); err != nil {
		t.Skipf("the project's traces are not beside this checkout (%v)", err)
	}
	s, err := parseScenarios("10M/20ms+50ms/trace:Verizon-LTE-short", testTraces)
	require.NoError(t, err)
	require.Len(t, s, 1)
	assert.False(t, s[0].Paths[0].Down.Trace != nil, "a fixed path")
	lte := s[0].Paths[1]
	require.NotNil(t, lte.Down.Trace)
	require.NotNil(t, lte.Up.Trace)
	assert.Equal(t, "Verizon-LTE-short", lte.Down.Trace.Name)
	assert.Equal(t, 50*time.Millisecond, lte.RTT())
	assert.NotSame(t, lte.Down.Trace, lte.Up.Trace, "the downlink's trace and the uplink's")
	assert.InDelta(t, 5.0e6, float64(lte.Down.MeanRate()), 0.05e6)
	assert.True(t, s[0].traced())

	abs, err := filepath.Abs(filepath.Join(testTraces, "TMobile-LTE-short"))
	require.NoError(t, err)
	s, err = parseScenarios("50ms/trace:"+abs+"+6M/20ms", "/no/such/folder")
	require.NoError(t, err, "a trace named by its path")
	assert.Equal(t, "TMobile-LTE-short", s[0].Paths[0].Down.Trace.Name)

	tr, err := parseScenarios("traces", testTraces)
	require.NoError(t, err)
	require.Len(t, tr, len(traceCells))
	for _, sc := range tr {
		assert.True(t, sc.traced(), sc.Name)
		assert.Equal(t, float64(gridQueue), sc.queueBDP(), sc.Name)
		assert.True(t, sc.Prune, sc.Name)
	}
	// Queues in BDPs of a trace's mean rate: 4 × 5 Mbit/s × 50 ms.
	assert.InDelta(t, 4*float64(tr[0].Paths[1].Down.MeanRate())*0.05/8, float64(tr[0].Paths[1].Down.Queue), 1)
}

// The loads, written in the Go benchmark format, read back as benchstat
// reads them: one result per load, keyed by its cell and contender, with
// the page load time and its ratio to the cell's bound.
func TestLoadsInTheBenchmarkFormat(t *testing.T) {
	scens, err := parseScenarios("6M/20ms+5M/50ms", testTraces)
	require.NoError(t, err)
	w, err := pageload.Parse("32x100KB", 1)
	require.NoError(t, err)
	records := []record{
		{Scenario: scens[0].Name, Workload: w.Name, Contender: "eaf", Rep: 0, PLT: 2700 * time.Millisecond, Retransmits: 3},
		{Scenario: scens[0].Name, Workload: w.Name, Contender: "eaf", Rep: 1, PLT: 2800 * time.Millisecond, Retransmits: 5, Timeouts: 1},
		{Scenario: scens[0].Name, Workload: w.Name, Contender: "rr", Rep: 0, PLT: 2600 * time.Millisecond},
	}
	res := newResults(scens, []pageload.Workload{w}, []string{"eaf", "rr"}, records)
	dir := t.TempDir()
	require.NoError(t, res.write(dir))
	f, err := os.Open(filepath.Join(dir, "loads.txt"))
	require.NoError(t, err)
	defer f.Close()
	bound := res.bound[cellKey{scens[0].Name, w.Name}]
	require.Positive(t, bound)
	r := benchfmt.NewReader(f, "loads.txt")
	var got []*benchfmt.Result
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.Result:
			got = append(got, rec.Clone())
		case *benchfmt.SyntaxError:
			t.Fatal(rec)
		}
	}
	require.NoError(t, r.Err())
	require.Len(t, got, len(records), "a result per load")
	for i, rec := range records {
		g := got[i]
		base, parts := g.Name.Parts()
		assert.Equal(t, "PageLoad", string(base))
		var names []string
		for _, p := range parts {
			names = append(names, string(p))
		}
		assert.Equal(t, []string{"/scenario=6M:20ms+5M:50ms", "/page=32×100KB", "/queue=1", "/contender=" + rec.Contender}, names,
			"the cell's slashes do not split the name")
		assert.Equal(t, "linux", g.GetConfig("goos"))
		plt, ok := g.Value("sec/op")
		require.True(t, ok, "the page load time")
		assert.InDelta(t, rec.PLT.Seconds(), plt, 1e-9)
		ratio, ok := g.Value("plt/bound")
		require.True(t, ok)
		assert.InDelta(t, rec.PLT.Seconds()/bound.Seconds(), ratio, 1e-4)
		n, ok := g.Value("retransmits")
		require.True(t, ok)
		assert.EqualValues(t, rec.Retransmits, n)
		n, ok = g.Value("timeouts")
		require.True(t, ok)
		assert.EqualValues(t, rec.Timeouts, n)
	}
}

// TestSmoke loads a tiny page once per contender on a tiny grid and checks
// the output is complete and consistent. It asserts no speed-up.
func TestSmoke(t *testing.T) {
	testbed.RequireRoot(t)
	scens, err := parseScenarios("20M/10ms+5M/50ms,asymmetric", testTraces)
	require.NoError(t, err)
	har, err := pageload.ReadHARFile("../../internal/pageload/testdata/search.har")
	require.NoError(t, err)
	workloads := []pageload.Workload{pageload.Uniform(4, 10_000, 2), har}
	keys := contenderKeys()
	if _, err := exec.LookPath("chromium"); err != nil {
		keys = slices.DeleteFunc(keys, isBrowser)
		t.Log("without chromium, the browser contenders are left out (apt-get install chromium; .ci/run installs it)")
	}
	// Both cells at once, each on a testbed of its own.
	r := run{workloads: workloads, contenders: keys, reps: 1, parallel: 2}
	records, err := r.all(scens)
	require.NoError(t, err)
	res := newResults(scens, r.workloads, keys, records)
	var order []string
	measuredLate := false
	for _, rec := range records {
		if len(order) == 0 || order[len(order)-1] != rec.Scenario {
			order = append(order, rec.Scenario)
		}
		measuredLate = measuredLate || rec.LateMean > 0
		assert.GreaterOrEqual(t, rec.LateMax, rec.LateMean, "%s: the latest packet is no earlier than the mean", rec.Contender)
	}
	assert.Equal(t, []string{scens[0].Name, scens[1].Name}, order, "the records in the cells' order, as a serial run's")
	assert.True(t, measuredLate, "each load carries the emulators' lateness during it")
	byName := map[string]pageload.Workload{}
	for _, w := range workloads {
		byName[w.Name] = w
	}
	assert.Len(t, res.cells, len(scens)*len(workloads))
	for _, k := range res.cells {
		assert.Len(t, res.by[k], len(keys), "%v: every contender measured", k)
	}
	for _, rec := range records {
		k := cellKey{rec.Scenario, rec.Workload}
		w := byName[rec.Workload]
		assert.Equal(t, w.Bytes(), rec.Bytes, "%v %s received the whole page", k, rec.Contender)
		assert.Greater(t, rec.PLT, res.bound[k], "%v %s: the lower bound is below every measured load", k, rec.Contender)
		n := 0
		for p, c := range rec.Paths {
			assert.Contains(t, []string{"p1", "p2"}, p)
			n += c
		}
		assert.Equal(t, len(w.Objects), n, "%s: every object's path is known", rec.Contender)
		// Every timeout sends a segment again.
		assert.GreaterOrEqual(t, rec.Retransmits, rec.Timeouts, "%v %s: retransmissions", k, rec.Contender)
	}
	assert.Len(t, records, len(scens)*len(workloads)*len(keys))

	var out strings.Builder
	res.printTables(&out)
	t.Log("\n" + out.String())
	for _, k := range keys {
		assert.Contains(t, out.String(), contenderNames[k])
	}
	dir := t.TempDir()
	require.NoError(t, res.write(dir))
	rows := readCSV(t, filepath.Join(dir, "loads.csv"))
	assert.Len(t, rows, 1+len(records), "a header and a row per load")
	assert.Subset(t, rows[0], []string{"server_retransmits", "server_timeouts", "queue_bdp", "moved", "split", "resumed", "late_max_ms", "late_mean_ms", "redone", "kept_late"})
	queueCol := slices.Index(rows[0], "queue_bdp")
	for _, row := range rows[1:] {
		assert.Equal(t, "1", row[queueCol], "the queue depth, in BDPs")
	}
	rows = readCSV(t, filepath.Join(dir, "summary.csv"))
	assert.Len(t, rows, 1+len(scens)*len(workloads)*len(keys), "a header and a row per cell and contender")
	b, err := os.ReadFile(filepath.Join(dir, "plt.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "<svg")
	b, err = os.ReadFile(filepath.Join(dir, "plt.png"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "\x89PNG"))
	_, err = os.Stat(filepath.Join(dir, "speedup-ecdf.svg"))
	assert.Equal(t, len(res.cells) < minECDFCells, os.IsNotExist(err), "the speedups' distribution only over %d cells or more: %v", minECDFCells, err)

}

// TestFailoverSmoke cuts path 1 once each way under two mechanisms and
// checks that every transfer completed byte for byte (the client checks
// the hash), that path 2 carried each cut transfer on, and that the table,
// CSV and plots are written. It asserts no speed.
func TestFailoverSmoke(t *testing.T) {
	testbed.RequireRoot(t)
	mechs := []string{"twostep", "quic"}
	results, err := failover(mechs, 1, 1)
	require.NoError(t, err)
	require.Len(t, results, len(mechs)*(1+len(cutKinds)))
	for _, r := range results {
		assert.Empty(t, r.Err, "%s %s", r.Mechanism, r.Cut)
		if r.Cut != "" {
			assert.Positive(t, r.Gap, "%s %s: path 2 carried the transfer on", r.Mechanism, r.Cut)
			assert.Less(t, r.Path2Before, int64(64<<10), "%s %s: path 2 idle before the cut", r.Mechanism, r.Cut)
		}
	}
	sums := summarize(results, mechs)
	var out strings.Builder
	printFailover(&out, sums, 1)
	t.Log(out.String())
	for _, m := range mechs {
		assert.Contains(t, out.String(), mechanismNames[m])
	}
	dir := t.TempDir()
	require.NoError(t, writeFailover(dir, results, sums))
	rows := readCSV(t, filepath.Join(dir, "failover.csv"))
	assert.Len(t, rows, 1+len(results))
	for _, name := range []string{"failover.svg", "failover-stall.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Contains(t, string(b), "<svg", name)
	}
}

func TestPercentile(t *testing.T) {
	five := msOf(10, 20, 30, 40, 50)
	assert.Equal(t, 50*time.Millisecond, percentile(five, 90), "of five loads, the 90th percentile is the worst")
	assert.Equal(t, 30*time.Millisecond, percentile(five, 50))
	ten := msOf(1, 2, 3, 4, 5, 6, 7, 8, 9, 100)
	assert.Equal(t, 9*time.Millisecond, percentile(ten, 90), "of ten, the ninth")
	assert.Equal(t, 7*time.Millisecond, percentile(msOf(7), 90))
}

// The single paths' loads split as a fluid: their transfer times combine
// as parallel resistances, after the quicker path's round trips; two equal
// paths halve the transfer. A load no longer than its round trips gives
// no estimate.
func TestFluidSplit(t *testing.T) {
	s := time.Second
	assert.Equal(t, 100*time.Millisecond+2*s, fluidSplit([]time.Duration{4*s + 100*time.Millisecond, 4*s + 100*time.Millisecond}, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}))
	got := fluidSplit([]time.Duration{4 * s, 6 * s}, []time.Duration{100 * time.Millisecond, 300 * time.Millisecond})
	assert.InDelta(t, 0.1+1/(1/3.9+1/5.7), got.Seconds(), 1e-9)
	assert.Zero(t, fluidSplit([]time.Duration{4 * s, 200 * time.Millisecond}, []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}))

	scens, err := parseScenarios("6M/20ms+5M/50ms", testTraces)
	require.NoError(t, err)
	w, err := pageload.Parse("32x100KB", 1)
	require.NoError(t, err)
	k := cellKey{scens[0].Name, w.Name}
	records := []record{
		{Scenario: k.scenario, Workload: k.workload, Contender: "path1", PLT: 4700 * time.Millisecond},
		{Scenario: k.scenario, Workload: k.workload, Contender: "path2", PLT: 5700 * time.Millisecond},
		{Scenario: k.scenario, Workload: k.workload, Contender: "eaf", PLT: 2700 * time.Millisecond},
	}
	res := newResults(scens, []pageload.Workload{w}, []string{"path1", "path2", "eaf"}, records)
	rtts := []time.Duration{w.LowerBound(20*time.Millisecond, math.Inf(1)), w.LowerBound(50*time.Millisecond, math.Inf(1))}
	assert.Equal(t, 60*time.Millisecond, rtts[0], "the page's three round trips on path 1")
	assert.Equal(t, fluidSplit([]time.Duration{4700 * time.Millisecond, 5700 * time.Millisecond}, rtts), res.fluid[k])
	assert.Greater(t, res.fluid[k], res.bound[k], "TCP carries less than the links' rates")

	res = newResults(scens, []pageload.Workload{w}, []string{"path1", "eaf"}, records[:1])
	assert.Zero(t, res.fluid[k], "without both paths alone, no estimate")
}

// The trace's per-path summary: bytes against the path's rate over the
// load, and how long before the load's end its last object was in.
func TestPathUses(t *testing.T) {
	res := pageload.Result{PLT: 2 * time.Second, Objects: []pageload.ObjectResult{
		{Bytes: 10_000, Path: "p1", End: 100 * time.Millisecond},
		{Bytes: 1_490_000, Path: "p1", End: 2 * time.Second},
		{Bytes: 500_000, Path: "p2", End: 1500 * time.Millisecond},
		{Bytes: 1_000, Path: "?", End: time.Second}, // localDev's unknown: no rate
	}}
	uses := pathUses(res, []int64{12e6, 4e6})
	require.Len(t, uses, 3)
	assert.Equal(t, "? carried 1 objects, 1000 B; its last one in 1s before the load's", uses[0].String())
	assert.Equal(t, "p1 carried 2 objects, 1500000 B: 50 % of 12.0 Mbit/s over the load's 2s; its last one in 0s before the load's", uses[1].String())
	assert.Equal(t, "p2 carried 1 objects, 500000 B: 50 % of 4.0 Mbit/s over the load's 2s; its last one in 500ms before the load's", uses[2].String())
}

// -conns reaches every contender's transport through the config the
// client copy of this program gets; unset, a browser's limit.
func TestConnsPerHost(t *testing.T) {
	for _, tc := range []struct{ set, want int }{{0, pageload.MaxConnsPerHost}, {3, 3}} {
		for _, key := range []string{"path1", "path2"} {
			c := newContender(key, config{ConnsPerHost: tc.set})
			tr, ok := c.rt.(*http.Transport)
			require.True(t, ok, key)
			assert.Equal(t, tc.want, tr.MaxConnsPerHost, "%s with -conns %d", key, tc.set)
		}
	}
	for _, conns := range []int{pageload.MaxConnsPerHost, 3} {
		tables, loads := oneLoadReport(t, conns, 1)
		if conns == pageload.MaxConnsPerHost {
			assert.NotContains(t, tables, "connections per host", "a browser's limit goes without saying")
			assert.Contains(t, loads, "/queue=1/contender=path1 ", "so that runs before -conns compare")
			continue
		}
		assert.Contains(t, tables, "; 3 connections per host", "a table says when its limit was not a browser's")
		assert.Contains(t, loads, "/queue=1/conns=3/contender=path1 ", "benchstat keeps such loads apart")
	}
}

// oneLoadReport is the tables and loads.txt of one load of path 1 on the
// symmetric preset, with -conns and -hosts as given.
func oneLoadReport(t *testing.T, conns, hosts int) (tables, loads string) {
	t.Helper()
	scens, err := parseScenarios("symmetric", testTraces)
	require.NoError(t, err)
	w := pageload.Uniform(2, 1000, 1)
	res := newResults(scens, []pageload.Workload{w}, []string{"path1"},
		[]record{{Scenario: scens[0].Name, Workload: w.Name, Contender: "path1", PLT: time.Second}})
	res.connsPerHost, res.hosts = conns, hosts
	var out strings.Builder
	res.printTables(&out)
	dir := t.TempDir()
	require.NoError(t, res.write(dir))
	b, err := os.ReadFile(filepath.Join(dir, "loads.txt"))
	require.NoError(t, err)
	return out.String(), string(b)
}

// -hosts is in a load's name where it is not 1: a page's name does not
// say it, and loads of one and of three hosts filed together (as turns
// does a build's) would otherwise be read as one cell's.
func TestHostsInLoadNames(t *testing.T) {
	for _, hosts := range []int{1, 3} {
		tables, loads := oneLoadReport(t, 3, hosts)
		if hosts == 1 {
			assert.NotContains(t, tables, "hosts")
			assert.Contains(t, loads, "/queue=1/conns=3/contender=path1 ", "so that runs before -hosts compare")
			continue
		}
		assert.Contains(t, tables, "; handcrafted pages over 3 hosts")
		assert.Contains(t, loads, "/queue=1/hosts=3/conns=3/contender=path1 ")
	}
}

// The goal's test: a contender's median against the best of the three
// baselines', with an interval from its own loads' spread, and how often
// a twin of the best baseline passes, which a cell's spread decides.
func TestGoal(t *testing.T) {
	scens, err := parseScenarios("symmetric,asymmetric", testTraces)
	require.NoError(t, err)
	w := pageload.Uniform(2, 1000, 1)
	loads := map[string]map[string][]time.Duration{
		// Steady loads: EAF a tenth slower than round robin every time.
		scens[0].Name: {"path1": msOf(2000, 2000, 2000), "path2": msOf(3000, 3000, 3000), "rr": msOf(1000, 1000, 1000),
			"eaf": msOf(1100, 1100, 1100), "eaf-hints": msOf(1000, 1010, 1020)},
		// Spread loads: round robin's median the best by chance.
		scens[1].Name: {"path1": msOf(1000, 1400, 1600), "path2": msOf(3000, 3000, 3000), "rr": msOf(900, 1300, 1700),
			"eaf": msOf(1000, 1350, 1500)},
	}
	records := recordsOf(loads, w)
	res := newResults(scens, []pageload.Workload{w}, []string{"path1", "path2", "rr", "eaf", "eaf-hints"}, records)

	assert.Empty(t, res.testGoal("rr"), "a baseline is not tested against itself")
	assert.NotContains(t, res.goals, "rr")
	hints := res.goals["eaf-hints"]
	require.Len(t, hints, 1, "only the cell that has the contender")
	assert.InDelta(t, 1.01, hints[0].ratio, 1e-9)

	cells := res.goals["eaf"]
	require.Len(t, cells, 2)
	steady, spread := cells[0], cells[1]
	assert.Equal(t, "rr", steady.best)
	assert.InDelta(t, 1.1, steady.ratio, 1e-9)
	assert.InDelta(t, 1.1, steady.lo, 1e-9, "no spread, no doubt")
	assert.InDelta(t, 1.1, steady.hi, 1e-9)
	assert.Equal(t, 1.0, steady.twin, "a twin of steady loads always passes")
	assert.InDelta(t, 1.1, steady.p90Ratio, 1e-9)

	assert.Equal(t, "rr", spread.best)
	assert.InDelta(t, 1350.0/1300, spread.ratio, 1e-9, "outside 3 %")
	assert.Less(t, spread.lo, goalMedianMargin, "but within it at the interval's low end")
	assert.Greater(t, spread.hi, spread.ratio)
	assert.Greater(t, spread.twin, 0.1)
	assert.Less(t, spread.twin, 0.9, "a twin of spread loads fails often")
	assert.Equal(t, cells, res.testGoal("eaf"), "the same loads, the same report")

	tally := tallyGoal(cells)
	assert.Equal(t, goalTally{cells: 2, within: 0, surelyOut: 1, p90Within: 2, twinWithin: 1 + spread.twin, twinPassAll: spread.twin}, tally)

	var out strings.Builder
	res.printGoal(&out)
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "EAF (intents): median within 3 % in 0 of 2 cells (outside even at its interval's low end in 1), p90 within 10 % in 2")
	assert.Contains(t, out.String(), "EAF, size hints (intents): median within 3 % in 1 of 1 cells")
	dir := t.TempDir()
	require.NoError(t, res.write(dir))
	rows := readCSV(t, filepath.Join(dir, "goal.csv"))
	require.Len(t, rows, 1+3, "a header and a row per tested contender and cell")
	assert.Equal(t, []string{"symmetric", w.Name, "eaf", "rr", "1.1000", "1.1000", "1.1000", "1.1000", "1.0000"}, rows[1])
}

// readCSV reads the CSV file name the report wrote.
func readCSV(t *testing.T, name string) [][]string {
	t.Helper()
	f, err := os.Open(name)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return rows
}

// A failed load counts apart: not as a time (a failure is no fast load),
// in the tables, loads.csv and summary.csv, and not in loads.txt.
func TestFailedLoadsCountApart(t *testing.T) {
	scens, err := parseScenarios("6M/20ms+5M/50ms", testTraces)
	require.NoError(t, err)
	w := pageload.Uniform(2, 1000, 1)
	var records []record
	add := func(c string, plt time.Duration, failed string) {
		records = append(records, record{Scenario: scens[0].Name, Workload: w.Name, Contender: c, Rep: len(records), PLT: plt, Failed: failed})
	}
	for _, ms := range []int{1000, 1100, 1200} {
		add("path1", time.Duration(ms)*time.Millisecond, "")
	}
	add("eaf", 900*time.Millisecond, "")
	add("eaf", 50*time.Millisecond, "body: intents: path p2 went down during the request")
	add("eaf", 950*time.Millisecond, "")
	for range 3 {
		add("rr", 10*time.Millisecond, "context deadline exceeded")
	}
	res := newResults(scens, []pageload.Workload{w}, []string{"path1", "eaf", "rr"}, records)
	k := res.cells[0]
	assert.Equal(t, 2, res.by[k]["eaf"].loads)
	assert.Equal(t, 900*time.Millisecond, res.by[k]["eaf"].min, "the failed load's time is no load time")
	assert.NotContains(t, res.by[k], "rr", "no times at all")
	assert.Equal(t, failure{1, "body: intents: path p2 went down during the request"}, res.failed[k]["eaf"])
	assert.Equal(t, 3, res.failed[k]["rr"].loads)

	var out strings.Builder
	res.printTables(&out)
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "EAF (intents) failed 1 loads; the first: body: intents: path p2 went down")
	assert.Regexp(t, `round robin \(intents\)\s+3 of 3`, out.String())

	dir := t.TempDir()
	require.NoError(t, res.write(dir))
	rows := readCSV(t, filepath.Join(dir, "loads.csv"))
	require.Len(t, rows, 1+len(records))
	failedCol := slices.Index(rows[0], "failed")
	assert.Equal(t, "context deadline exceeded", rows[len(rows)-1][failedCol])
	assert.Empty(t, rows[1][failedCol])
	bench, err := os.ReadFile(filepath.Join(dir, "loads.txt"))
	require.NoError(t, err)
	assert.Equal(t, 5, strings.Count(string(bench), "BenchmarkPageLoad/"), "the completed loads only")
	rows = readCSV(t, filepath.Join(dir, "summary.csv"))
	assert.Equal(t, "1", rows[2][slices.Index(rows[0], "loads_failed")], "EAF's row")
}

// A load that fails (here at once: an object of a negative size) is
// recorded as failed, with its error, not as a load that completed.
func TestNetnsFailedLoadIsRecorded(t *testing.T) {
	testbed.RequireRoot(t)
	scens, err := parseScenarios("20M/10ms+20M/10ms", testTraces)
	require.NoError(t, err)
	w := pageload.Workload{Name: "invalid", Objects: []pageload.Object{{Size: 1000}, {Size: -1, Deps: []int{0}}}}
	r := run{workloads: []pageload.Workload{w}, contenders: []string{"path1"}, reps: 1}
	records, err := r.all(scens)
	require.NoError(t, err)
	require.Len(t, records, 1)
	assert.Contains(t, records[0].Failed, "negative host or size", "the load's error")
}

// msOf is load times in milliseconds.
func msOf(v ...int) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x) * time.Millisecond
	}
	return d
}

// recordsOf is the records of loads, by scenario and contender, of page w.
func recordsOf(loads map[string]map[string][]time.Duration, w pageload.Workload) []record {
	var records []record
	for scen, m := range loads {
		for c, d := range m {
			for i, plt := range d {
				records = append(records, record{Scenario: scen, Workload: w.Name, Contender: c, Rep: i, PLT: plt})
			}
		}
	}
	return records
}
