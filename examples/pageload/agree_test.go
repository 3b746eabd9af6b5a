//go:build linux

package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/pageload"
)

// A run written to its folder reads back as the same cells and loads.
func TestRunReadsBack(t *testing.T) {
	w := pageload.Uniform(4, 10_000, 2)
	scens, err := parseScenarios("20M/10ms+5M/50ms,6M/20ms+5M/50ms", testTraces)
	require.NoError(t, err)
	var recs []record
	for i, sc := range scens {
		for rep := range 5 {
			for j, c := range []string{"path1", "path2", "eaf"} {
				recs = append(recs, record{Scenario: sc.Name, Workload: w.Name, Contender: c, Rep: rep,
					PLT: time.Duration(1000+100*i+10*j+rep) * time.Millisecond})
			}
		}
	}
	recs[0].Failed = "it broke"
	dir := t.TempDir()
	require.NoError(t, newResults(scens, []pageload.Workload{w}, []string{"path1", "path2", "eaf"}, recs).write(dir))
	back, err := readRun(dir)
	require.NoError(t, err)
	require.Len(t, back, len(recs))
	for i := range recs {
		assert.Equal(t, recs[i].Scenario, back[i].Scenario)
		assert.Equal(t, recs[i].PLT, back[i].PLT)
		assert.Equal(t, recs[i].Failed, back[i].Failed)
	}
	r, err := runResults(back, testTraces)
	require.NoError(t, err)
	assert.Equal(t, []cellKey{{scens[0].Name, w.Name}, {scens[1].Name, w.Name}}, r.cells)
	assert.Len(t, r.testPaper("eaf").cells, 2)
}

// The candidate passes when it agrees with each reference in as many
// cells as the references' noise allows, and fails when it is off in more
// cells, or counts more cells clearly slower than that noise allows.
func TestJudgeAgreement(t *testing.T) {
	cells := func(ratios ...float64) map[cellKey]ratioInterval {
		m := map[cellKey]ratioInterval{}
		for i, x := range ratios {
			m[cellKey{scenario: string(rune('a' + i)), workload: "p"}] = ratioInterval{x, x - 0.05, x + 0.05}
		}
		return m
	}
	s1 := runVerdict{"s1", cells(1.0, 1.1, 0.9, 1.2), 1}
	s2 := runVerdict{"s2", cells(1.02, 1.12, 0.88, 1.4), 2} // off in the last cell
	noise := agreeNoise{share: 0.75, off: 1}
	same := runVerdict{"p", cells(1.01, 1.11, 0.9, 1.3), 2}
	v := judgeAgreement([]runVerdict{s1, s2, same}, noise)
	assert.True(t, v.passes, "off in one cell of four against each, as the noise allows")
	assert.Len(t, v.pairs, 3)

	worse := runVerdict{"p", cells(1.2, 1.11, 0.9, 1.3), 2} // off in the first cell too
	assert.False(t, judgeAgreement([]runVerdict{s1, s2, worse}, noise).passes)
	counts := runVerdict{"p", cells(1.01, 1.11, 0.9, 1.3), 4}
	assert.False(t, judgeAgreement([]runVerdict{s1, s2, counts}, noise).passes, "two more cells clearly slower than either reference")

	var out strings.Builder
	assert.Error(t, agree(&out, []string{"a", "b"}, testTraces), "two runs cannot judge a third")
}

// The references' noise is at least as wide as they are apart, and two
// standard errors wider in the share of cells they agree in.
func TestReferenceNoise(t *testing.T) {
	w := pageload.Uniform(4, 10_000, 2)
	scens, err := parseScenarios("20M/10ms+5M/50ms,6M/20ms+5M/50ms,2M/20ms+5M/50ms,12M/20ms+5M/50ms", testTraces)
	require.NoError(t, err)
	run := func(eafOffset ...int) *results {
		var recs []record
		for i, sc := range scens {
			for rep := range 10 {
				for j, c := range []string{"path1", "path2", "eaf"} {
					ms := 1000 + 300*j + rep
					if c == "eaf" {
						ms = 1000 + eafOffset[i] + rep
					}
					recs = append(recs, record{Scenario: sc.Name, Workload: w.Name, Contender: c, Rep: rep, PLT: time.Duration(ms) * time.Millisecond})
				}
			}
		}
		return newResults(scens, []pageload.Workload{w}, []string{"path1", "path2", "eaf"}, recs)
	}
	same := run(0, 0, 0, 0)
	assert.Equal(t, agreeNoise{share: 1, off: 0}, referenceNoise([]*results{same, same}, "eaf"), "identical runs: no noise")
	// Apart in one cell of four, where one of them is clearly slower.
	noise := referenceNoise([]*results{same, run(200, 0, 0, 0)}, "eaf")
	q := 0.75
	assert.InDelta(t, q-2*math.Sqrt(q*(1-q)/4), noise.share, 1e-9)
	assert.Equal(t, 1, noise.off, "one cell apart; sqrt(2 × 0.5) rounds to 1")
	noise = referenceNoise([]*results{run(200, 200, 200, 200), run(200, 200, 200, 200)}, "eaf")
	assert.Equal(t, 1.0, noise.share)
	assert.Equal(t, 3, noise.off, "four cells clearly slower in each: counts that large differ by sqrt(8) by chance")
}
