//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// A load's estimates are judged per second in which the path carried
// data, against what the trace offered in that second, from the position
// the load started at.
func TestEstimateErrors(t *testing.T) {
	// 12 Mbit/s for a second, then 24 Mbit/s for one: a 2 s schedule.
	var lines []string
	for ms := 1; ms <= 2000; ms++ {
		lines = append(lines, strconv.Itoa(ms))
		if ms > 1000 {
			lines = append(lines, strconv.Itoa(ms))
		}
	}
	tr, err := testbed.ParseTrace("steps", strings.NewReader(strings.Join(lines, "\n")))
	require.NoError(t, err)
	sc := scenario{Name: "steps", Paths: []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 10e6),
		{Up: testbed.LinkParams{Delay: 25 * time.Millisecond, Trace: tr}, Down: testbed.LinkParams{Delay: 25 * time.Millisecond, Trace: tr}}}}
	require.True(t, sc.traced())
	assert.InEpsilon(t, 12e6, offered(sc, 1, 0, 0, time.Second), 0.01)
	assert.InEpsilon(t, 24e6, offered(sc, 1, 0, time.Second, 2*time.Second), 0.01)
	assert.InEpsilon(t, 24e6, offered(sc, 1, 1, time.Second, 2*time.Second), 0.01, "load 1 starts a stride on: a whole number of periods here")
	assert.Equal(t, 10e6, offered(sc, 0, 3, 0, time.Second), "a fixed path offers its rate")

	sample := func(at time.Duration, path string, capacity, received int64) estimateSample {
		return estimateSample{At: at, Path: path, Capacity: capacity, Received: received}
	}
	rec := record{Scenario: "steps", Workload: "page", Contender: "eaf", PLT: 2300 * time.Millisecond, Estimates: []estimateSample{
		sample(0, "p1", 10e6, 0), sample(0, "p2", 10e6, 0),
		sample(time.Second, "p1", 10e6, 5000), sample(time.Second, "p2", 12e6, 100_000),
		sample(2*time.Second, "p1", 10e6, 5000), sample(2*time.Second, "p2", 30e6, 200_000),
		sample(2300*time.Millisecond, "p1", 10e6, 5000), sample(2300*time.Millisecond, "p2", 24e6, 200_000),
	}}
	failed := rec
	failed.Failed = "context deadline exceeded"
	other := rec
	other.Contender = "rr"
	errs := estimateErrors(sc, []record{rec, failed, other}, "eaf")
	require.Len(t, errs, 2, "path 2's first two seconds: path 1 carried too little, the last 0.3 s nothing, the failed load and rr's are not EAF's")
	assert.Equal(t, 1, errs[0].path)
	assert.Equal(t, 12e6, errs[0].estimate)
	assert.InEpsilon(t, 12e6, errs[0].offered, 0.01)
	assert.Equal(t, 30e6, errs[1].estimate, "the estimate at the window's end")
	m, n := medianRelError(errs, 1, 18e6)
	assert.Equal(t, 2, n)
	assert.InDelta(t, (0+6e6/18e6)/2, m, 0.01)
	_, n = medianRelError(errs, 0, 10e6)
	assert.Zero(t, n)

	var out strings.Builder
	printEstimates(&out, []scenario{sc}, []record{rec}, []string{"path1", "eaf"})
	assert.Contains(t, out.String(), "steps, path 2 (steps, mean 18.0 Mbit/s), EAF (intents): 17 % over 2 windows")

	dir := t.TempDir()
	require.NoError(t, writeEstimates(dir, []scenario{sc}, []record{rec}, []string{"rr", "eaf"}, "page"))
	rows := readCSV(t, filepath.Join(dir, "estimates.csv"))
	require.Len(t, rows, 1+len(rec.Estimates))
	assert.Equal(t, []string{"steps", "page", "eaf", "0", "2.0000", "p2", "30000000", "0.00", "200000"}, rows[6][:9])
	b, err := os.ReadFile(filepath.Join(dir, "estimates-1.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "<svg")
}

// A mark is the span of samples that saw the path unresponsive.
func TestMarks(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	s := func(at int, path string, silent bool) estimateSample {
		return estimateSample{At: ms(at), Path: path, Unresponsive: silent}
	}
	rec := record{Scenario: "x", Contender: "eaf", Estimates: []estimateSample{
		s(0, "p1", false), s(0, "p2", false),
		s(25, "p1", false), s(25, "p2", true),
		s(50, "p1", false), s(50, "p2", true),
		s(75, "p1", true), s(75, "p2", false),
		s(100, "p1", true), s(100, "p2", true),
	}}
	assert.Equal(t, []mark{{"p2", ms(25), ms(75)}, {"p1", ms(75), ms(100)}, {"p2", ms(100), ms(100)}}, marks(rec),
		"cleared at the first sample without it; open at the load's end")
	sc := scenario{Name: "x", Paths: []testbed.PathSpec{{Down: testbed.LinkParams{Trace: &testbed.Trace{}}}}}
	var out strings.Builder
	printMarks(&out, []scenario{sc}, []record{rec}, []string{"eaf"})
	assert.Contains(t, out.String(), "x, EAF (intents): p2 marked 2 times in 1 loads, for 50ms (median) to 50ms")
	assert.Contains(t, out.String(), "x, EAF (intents): p1 marked 1 times in 1 loads, for 25ms (median) to 25ms")
}
