package pageload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitsFor is every object i waits for, directly or not, in index order.
func waitsFor(w Workload, i int) []int {
	seen := map[int]bool{}
	stack := slices.Clone(w.Objects[i].Deps)
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !seen[d] {
			seen[d] = true
			stack = append(stack, w.Objects[d].Deps...)
		}
	}
	return slices.Sorted(func(yield func(int) bool) {
		for d := range seen {
			if !yield(d) {
				return
			}
		}
	})
}

// everyFinished is the heuristic spelled out: entry i (by start) waits for
// every earlier entry that ended by the time it started.
func everyFinished(starts, ends []time.Time) [][]int {
	deps := make([][]int, len(starts))
	for i := range starts {
		for j := range i {
			if !ends[j].After(starts[i]) {
				deps[i] = append(deps[i], j)
			}
		}
	}
	return deps
}

// harOf writes a HAR of GET entries with the given start offsets and
// durations (ms) to one host.
func harOf(startMS, durMS []int) []byte {
	type entry struct {
		StartedDateTime time.Time         `json:"startedDateTime"`
		Time            float64           `json:"time"`
		Request         map[string]string `json:"request"`
		Response        map[string]int    `json:"response"`
	}
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var es []entry
	for i := range startMS {
		es = append(es, entry{t0.Add(time.Duration(startMS[i]) * time.Millisecond), float64(durMS[i]),
			map[string]string{"method": "GET", "url": fmt.Sprintf("http://a.example/%d", i)},
			map[string]int{"status": 200, "bodySize": 1000 + i}})
	}
	b, err := json.Marshal(map[string]any{"log": map[string]any{"version": "1.2", "entries": es}})
	if err != nil {
		panic(err)
	}
	return b
}

// checkSameWaits checks that w's objects wait, directly or not, for exactly
// what the heuristic spelled out says.
func checkSameWaits(t *testing.T, w Workload, starts, ends []time.Time) {
	t.Helper()
	want := everyFinished(starts, ends)
	for i := range w.Objects {
		got := waitsFor(w, i)
		if len(got) == 0 {
			got = nil
		}
		require.Equal(t, want[i], got, "object %d", i)
	}
}

func TestHARFrontierKeepsTheSemantics(t *testing.T) {
	for _, name := range []string{"news", "search", "blog"} {
		f, err := os.ReadFile("testdata/" + name + ".har")
		require.NoError(t, err)
		var h har
		require.NoError(t, json.Unmarshal(f, &h))
		w, err := ReadHAR(bytes.NewReader(f), name)
		require.NoError(t, err)
		var starts, ends []time.Time
		for _, e := range h.Log.Entries {
			if (e.Request.Method == "" || e.Request.Method == "GET") && e.Response.Status != 0 {
				starts = append(starts, e.StartedDateTime)
				ends = append(ends, e.StartedDateTime.Add(time.Duration(e.Time*float64(time.Millisecond))))
			}
		}
		// The fixtures are in start order, as ReadHAR sorts them.
		require.True(t, slices.IsSortedFunc(starts, time.Time.Compare), name)
		checkSameWaits(t, w, starts, ends)
	}
	// Random pages, with ties and zero durations.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + rng.IntN(40)
		startMS, durMS := make([]int, n), make([]int, n)
		for i := range n {
			startMS[i], durMS[i] = rng.IntN(50), rng.IntN(20)
		}
		slices.Sort(startMS)
		w, err := ReadHAR(bytes.NewReader(harOf(startMS, durMS)), "random")
		require.NoError(t, err)
		starts, ends := make([]time.Time, n), make([]time.Time, n)
		for i := range n {
			starts[i] = time.UnixMilli(int64(startMS[i]))
			ends[i] = starts[i].Add(time.Duration(durMS[i]) * time.Millisecond)
		}
		checkSameWaits(t, w, starts, ends)
	}
}

// TestHARImportIsNotQuadratic imports 20,000 back-to-back entries (each
// starts when the one before ended): every entry waits for all earlier
// ones, which the old import wrote out as 200 million edges (6.5 GB, 10 s).
func TestHARImportIsNotQuadratic(t *testing.T) {
	const n = 20_000
	startMS, durMS := make([]int, n), make([]int, n)
	for i := range n {
		startMS[i], durMS[i] = i, 1
	}
	w, err := ReadHAR(bytes.NewReader(harOf(startMS, durMS)), "chain")
	require.NoError(t, err)
	edges := 0
	for _, o := range w.Objects {
		edges += len(o.Deps)
	}
	assert.Equal(t, n-1, edges, "one edge each: the entry before")
	assert.Equal(t, n, w.Levels())
}

// TestLowerBoundMemoryIsLinear computes the bound of a 5,000-object chain
// (23 s and a 25 MB matrix before) and checks what it allocated.
func TestLowerBoundMemoryIsLinear(t *testing.T) {
	const n = 5000
	w := Workload{Objects: make([]Object, n)}
	for i := range w.Objects {
		w.Objects[i].Size = 1000
		if i > 0 {
			w.Objects[i].Deps = []int{i - 1}
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := w.LowerBound(10*time.Millisecond, 8e6)
	runtime.ReadMemStats(&after)
	// A chain: handshake, then n request round trips and their bytes.
	want := 10*time.Millisecond + n*(10*time.Millisecond+time.Millisecond)
	assert.InDelta(t, want, got, float64(time.Microsecond))
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "O(n) memory, not an n² matrix")
}

// lowerBoundByMatrix is the bound as first written, from the full matrix of
// who waits for whom: the reference for the word-at-a-time version.
func lowerBoundByMatrix(w Workload, rtt time.Duration, rate float64) time.Duration {
	n := len(w.Objects)
	xfer := func(b int64) time.Duration { return time.Duration(float64(b) * 8 / rate * float64(time.Second)) }
	after := make([][]bool, n)
	chain := make([]time.Duration, n)
	for y, o := range w.Objects {
		after[y] = make([]bool, n)
		for _, d := range o.Deps {
			after[y][d] = true
			for x := range d {
				after[y][x] = after[y][x] || after[d][x]
			}
			chain[y] = max(chain[y], chain[d])
		}
		chain[y] += rtt + xfer(o.Size)
	}
	worst := rtt + xfer(w.Bytes())
	for x := range n {
		var waiting int64
		for y := x + 1; y < n; y++ {
			if after[y][x] {
				waiting += w.Objects[y].Size
			}
		}
		t := chain[x]
		if waiting > 0 {
			t += rtt + xfer(waiting)
		}
		worst = max(worst, t)
	}
	return rtt + worst
}

func TestLowerBoundMatchesTheMatrix(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		n := 1 + rng.IntN(200)
		w := Workload{Objects: make([]Object, n)}
		for i := range w.Objects {
			w.Objects[i].Size = rng.Int64N(200_000)
			for d := range i {
				if rng.IntN(i+1) < 2 {
					w.Objects[i].Deps = append(w.Objects[i].Deps, d)
				}
			}
		}
		rtt, rate := time.Duration(1+rng.IntN(100))*time.Millisecond, float64(1+rng.IntN(50))*1e6
		require.Equal(t, lowerBoundByMatrix(w, rtt, rate), w.LowerBound(rtt, rate))
	}
	for _, name := range []string{"news", "search", "blog"} {
		w, err := ReadHARFile("testdata/" + name + ".har")
		require.NoError(t, err)
		assert.Equal(t, lowerBoundByMatrix(w, 20*time.Millisecond, 10e6), w.LowerBound(20*time.Millisecond, 10e6), name)
	}
}

// FuzzReadHAR feeds arbitrary documents to the importer: it returns a
// valid workload or an error, never panics, and its dependencies say what
// the heuristic says. Large seeds: run with -fuzzminimizetime so that
// minimising does not look like a hang.
func FuzzReadHAR(f *testing.F) {
	for _, name := range []string{"news", "search", "blog"} {
		b, err := os.ReadFile("testdata/" + name + ".har")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(harOf([]int{0, 0, 5, 5, 7}, []int{5, 0, 2, 0, 1}))
	f.Add([]byte(`{"log":{"entries":[{"startedDateTime":"2026-11-30T09:00:00Z","time":-1}]}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		w, err := ReadHAR(bytes.NewReader(doc), "fuzz")
		if err != nil {
			return
		}
		require.NoError(t, w.Validate())
		var h har
		require.NoError(t, json.Unmarshal(doc, &h))
		var starts, ends []time.Time
		for _, e := range h.Log.Entries {
			if (e.Request.Method == "" || e.Request.Method == "GET") && e.Response.Status != 0 {
				starts = append(starts, e.StartedDateTime)
				ends = append(ends, e.StartedDateTime.Add(time.Duration(e.Time*float64(time.Millisecond))))
			}
		}
		if len(starts) > 300 {
			return // the spelled-out heuristic is quadratic
		}
		order := make([]int, len(starts))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return starts[a].Compare(starts[b]) })
		s2, e2 := make([]time.Time, len(order)), make([]time.Time, len(order))
		for i, j := range order {
			s2[i], e2[i] = starts[j], ends[j]
		}
		checkSameWaits(t, w, s2, e2)
		_ = w.LowerBound(time.Millisecond, 1e6)
	})
}
