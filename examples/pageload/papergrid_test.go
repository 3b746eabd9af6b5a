//go:build linux

package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/pageload"
)

// The paper grid is a fixed sample of the paper's factorial: every level
// of every factor, interface 1's rates 8 times each and the other factors'
// levels 12, the cells where a weak path was seen to slow pages, no pair
// of two 0.5 Mbit/s paths, the grids' queues, and pruning on.
func TestPapergridSample(t *testing.T) {
	g, err := parseScenarios("papergrid", testTraces)
	require.NoError(t, err)
	require.Len(t, g, 48)
	rate1, rtt1, rate2, rtt2 := map[float64]int{}, map[int]int{}, map[float64]int{}, map[int]int{}
	names := map[string]bool{}
	for _, c := range papergridCells {
		rate1[c.rate1]++
		rtt1[c.rtt1]++
		rate2[c.rate2]++
		rtt2[c.rtt2]++
		assert.False(t, c.rate1 == 0.5 && c.rate2 == 0.5, "%v: two 0.5 Mbit/s paths", c)
		assert.Contains(t, levels1Rate, c.rate1)
		assert.Contains(t, levels1RTT, c.rtt1)
		assert.Contains(t, levels2Rate, c.rate2)
		assert.Contains(t, levels2RTT, c.rtt2)
	}
	for _, l := range levels1Rate {
		assert.Equal(t, 8, rate1[l], "interface 1 at %g Mbit/s", l)
	}
	for _, l := range levels1RTT {
		assert.Equal(t, 12, rtt1[l], "interface 1 at %d ms", l)
	}
	for _, l := range levels2Rate {
		assert.Equal(t, 12, rate2[l], "interface 2 at %g Mbit/s", l)
	}
	for _, l := range levels2RTT {
		assert.Equal(t, 12, rtt2[l], "interface 2 at %d ms", l)
	}
	for _, sc := range g {
		assert.False(t, names[sc.Name], "%s twice", sc.Name)
		names[sc.Name] = true
		assert.Equal(t, float64(gridQueue), sc.queueBDP(), sc.Name)
		assert.True(t, sc.Prune, sc.Name)
	}
	for _, seen := range []string{"20M/20ms+0.5M/200ms", "50M/10ms+5M/200ms", "0.5M/10ms+20M/50ms", "2M/20ms+50M/100ms"} {
		assert.True(t, names[seen], "%s in the sample", seen)
	}
}

// A single path is left out where its page's arithmetic time is over three
// times the other's, only where the scenario prunes, and only if it was
// to run.
func TestLeftOut(t *testing.T) {
	big, err := pageload.Parse("32x100KB", 1)
	require.NoError(t, err)
	all := []string{"path1", "path2", "rr", "eaf"}
	scen := func(spec string, prune bool) scenario {
		s, err := parseScenarios(spec, testTraces)
		require.NoError(t, err)
		s[0].Prune = prune
		return s[0]
	}
	assert.Equal(t, []string{"path1"}, leftOut(scen("0.5M/10ms+20M/50ms", true), big, all), "51 s against 1.4")
	assert.Equal(t, []string{"path2"}, leftOut(scen("20M/20ms+0.5M/200ms", true), big, all))
	assert.Empty(t, leftOut(scen("0.5M/10ms+20M/50ms", false), big, all), "not pruned")
	assert.Empty(t, leftOut(scen("0.5M/10ms+20M/50ms", true), big, []string{"path2", "eaf"}), "not run anyway")
	assert.Empty(t, leftOut(scen("6M/20ms+5M/50ms", true), big, all), "alike")
	// 2 Mbit/s at 50 ms: 12.8 s and a few round trips; 20 Mbit/s at
	// 200 ms: 1.3 s and eight round trips of 200 ms, 2.9 s. Four times.
	assert.Equal(t, []string{"path1"}, leftOut(scen("2M/50ms+20M/200ms", true), big, all))

	// The tables say which path was left out, and its arithmetic.
	pruned := scen("0.5M/10ms+20M/50ms", true)
	alone := aloneBounds(pruned, big)
	res := newResults([]scenario{pruned}, []pageload.Workload{big}, all, nil)
	assert.Equal(t, []leftOutPath{{"path1", alone[0], alone[1]}}, res.leftOut[res.cells[0]])
	var out strings.Builder
	res.printTables(&out)
	assert.Contains(t, out.String(), fmt.Sprintf("path 1 (net/http) left out: by arithmetic at least %.2f s, over 3 × the other path's %.2f s",
		alone[0].Seconds(), alone[1].Seconds()))
	assert.Greater(t, alone[0], 3*alone[1])
}

// The paper's rule: a cell is clearly slower than the better single path
// only if the median is over 1.05 × the better path's and the fastest
// load over its median; the tally counts those and the cells over 1.3 ×,
// and a twin of steady loads is never clearly slower.
func TestPaperRule(t *testing.T) {
	scens, err := parseScenarios("6M/20ms+5M/50ms,20M/10ms+5M/50ms,2M/50ms+20M/200ms,symmetric", testTraces)
	require.NoError(t, err)
	w := pageload.Uniform(2, 1000, 1)
	loads := map[string]map[string][]time.Duration{
		// Clearly slower: 1.1 × and every load over path 1's median.
		scens[0].Name: {"path1": msOf(1000, 1000, 1000), "path2": msOf(2000, 2000, 2000), "eaf": msOf(1050, 1100, 1200)},
		// Slower by the median, but one load as fast as the better path.
		scens[1].Name: {"path1": msOf(1000, 1000, 1000), "path2": msOf(1500, 1500, 1500), "eaf": msOf(990, 1100, 1200)},
		// Path 1 left out: path 2 is the better path; over 1.3 ×.
		scens[2].Name: {"path2": msOf(1000, 1000, 1000), "eaf": msOf(1400, 1400, 1400)},
		// Faster.
		scens[3].Name: {"path1": msOf(1000, 1000, 1000), "path2": msOf(1000, 1000, 1000), "eaf": msOf(600, 700, 800)},
	}
	records := recordsOf(loads, w)
	res := newResults(scens, []pageload.Workload{w}, []string{"path1", "path2", "eaf"}, records)
	assert.Empty(t, res.testPaper("path1").cells, "a single path is not tested against itself")
	tally := res.testPaper("eaf")
	require.Len(t, tally.cells, 4)
	want := []struct {
		better        string
		ratio         float64
		clearlySlower bool
	}{{"path1", 1.1, true}, {"path1", 1.1, false}, {"path2", 1.4, true}, {"path1", 0.7, false}}
	for i, c := range tally.cells {
		assert.Equal(t, want[i].better, c.better, c.key.scenario)
		assert.InDelta(t, want[i].ratio, c.ratio, 1e-9, c.key.scenario)
		assert.Equal(t, want[i].clearlySlower, c.clearlySlower, c.key.scenario)
	}
	assert.Equal(t, 2, tally.slower)
	assert.Equal(t, 1, tally.over)
	assert.False(t, tally.passes(tally.slower, tally.over))
	assert.Zero(t, tally.twinSlower, "a twin of steady loads")
	assert.Equal(t, 1.0, tally.twinPasses)
	assert.InDelta(t, 1.1*1.1*1.4*0.7, tally.geomean*tally.geomean*tally.geomean*tally.geomean, 1e-9)
	assert.Equal(t, tally, res.testPaper("eaf"), "the same loads, the same report")

	var out strings.Builder
	res.printPaper(&out, 2)
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "EAF (intents): clearly slower in 2 of 4 cells (50.0 %), over 1.3 × in 1")
	assert.Contains(t, out.String(), ": fails;")
	cmds := tally.confirmCommands()
	require.Len(t, cmds, 1, "one page")
	assert.Contains(t, out.String(), cmds[0])
	args := strings.Fields(cmds[0])
	require.Greater(t, len(args), 4)
	assert.Equal(t, []string{"-scenario", "6M/20ms+5M/50ms,2M/50ms+20M/200ms", "-workload", "2x1KB"}, args[1:5],
		"the clearly slower cells only, each once, and the page as the flag spells it")
	again, err := parseScenarios(args[2], testTraces)
	require.NoError(t, err)
	assert.Equal(t, []string{scens[0].Name, scens[2].Name}, []string{again[0].Name, again[1].Name})
	assert.Empty(t, paperTally{cells: tally.cells[3:]}.confirmCommands(), "nothing to confirm")
	confirmed := slices.Clone(tally.cells)
	for i := range confirmed {
		confirmed[i].loads = confirmReps
	}
	assert.Empty(t, paperTally{cells: confirmed}.confirmCommands(), "cells measured with enough loads already")
	twoPages := slices.Clone(tally.cells)
	twoPages[2].key.workload = "mixed1"
	assert.Equal(t, []string{
		"pageload -scenario 6M/20ms+5M/50ms -workload 2x1KB -prune -queue 4 -reps 10 -contenders path1,path2,eaf",
		"pageload -scenario 2M/50ms+20M/200ms -workload mixed1 -prune -queue 4 -reps 10 -contenders path1,path2,eaf",
	}, paperTally{cells: twoPages}.confirmCommands(), "a command a page, with its own cells")
	dir := t.TempDir()
	require.NoError(t, res.write(dir))
	rows := readCSV(t, filepath.Join(dir, "paper.csv"))
	require.Len(t, rows, 1+4)
	assert.Equal(t, []string{"2M/50ms+20M/200ms", w.Name, "eaf", "path2", "1.4000", "1.4000", "true"}, rows[3])
}

// drawSecondSample draws papergrid2Cells' way: the factorial's cells in
// order, less the paper grid's and the pairs of two 0.5 Mbit/s paths,
// shuffled by a PCG seeded 2026, 77, the first n.
func drawSecondSample(n int) []paperCellSpec {
	var rest []paperCellSpec
	for _, r1 := range levels1Rate {
		for _, d1 := range levels1RTT {
			for _, r2 := range levels2Rate {
				for _, d2 := range levels2RTT {
					c := paperCellSpec{r1, d1, r2, d2}
					if slices.Contains(papergridCells, c) || (r1 == 0.5 && r2 == 0.5) {
						continue
					}
					rest = append(rest, c)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(2026, 77))
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return rest[:n]
}

// The second sample is the fixed draw it says it is, apart from the
// paper grid, and set up as it is.
func TestPapergrid2Sample(t *testing.T) {
	assert.Equal(t, drawSecondSample(48), papergrid2Cells)
	g, err := parseScenarios("papergrid2", testTraces)
	require.NoError(t, err)
	require.Len(t, g, 48)
	first := map[string]bool{}
	for _, sc := range papergrid() {
		first[sc.Name] = true
	}
	for _, sc := range g {
		assert.False(t, first[sc.Name], "%s is in the paper grid too", sc.Name)
		assert.Equal(t, float64(gridQueue), sc.queueBDP(), sc.Name)
		assert.True(t, sc.Prune, sc.Name)
	}
	check, err := parseScenarios("gridcheck", testTraces)
	require.NoError(t, err)
	require.Len(t, check, 8)
	for _, sc := range check {
		assert.True(t, first[sc.Name], "%s: the check's cells are the paper grid's", sc.Name)
	}
}
