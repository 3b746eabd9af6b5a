package pageload

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// har is the part of HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/)
// a workload needs.
type har struct {
	Log struct {
		Version string `json:"version"`
		Entries []struct {
			StartedDateTime time.Time `json:"startedDateTime"`
			Time            float64   `json:"time"` // ms, the sum of the timings
			Request         struct {
				Method string `json:"method"`
				URL    string `json:"url"`
			} `json:"request"`
			Response struct {
				Status   int   `json:"status"`
				BodySize int64 `json:"bodySize"`
				Content  struct {
					Size     int64  `json:"size"`
					MimeType string `json:"mimeType"`
				} `json:"content"`
			} `json:"response"`
		} `json:"entries"`
	} `json:"log"`
}

// maxEntryMS bounds an entry's duration: a day is no page load, and the
// bound keeps its conversion to a time.Duration from overflowing.
const maxEntryMS = 24 * 60 * 60 * 1000

// ReadHARFile reads a HAR file as a workload named after the file.
func ReadHARFile(name string) (Workload, error) {
	f, err := os.Open(name)
	if err != nil {
		return Workload{}, err
	}
	defer f.Close()
	return ReadHAR(f, strings.TrimSuffix(filepath.Base(name), ".har"))
}

// ReadHAR reads a HAR 1.2 log (as browsers export it) as a workload: one
// object per GET entry with a response, in start order, of the entry's
// transferred body size (or its content size where the body size is
// unknown) and of the type its MIME type says (see TypeOf). Hosts are
// numbered in the order they first appear.
//
// Dependencies follow the Socket Intents paper's conservative heuristic:
// an object waits for every object that had finished before it started.
// That keeps the recorded order and never starts an object earlier than
// the browser could have. Deps hold only the frontier of that set, the
// objects not already waited for through another (see frontierDeps): what
// an object waits for, directly or not, is the same, without an edge from
// every object to every earlier one (a HAR of back-to-back requests would
// otherwise have n²/2 of them).
func ReadHAR(r io.Reader, name string) (Workload, error) {
	var h har
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		return Workload{}, fmt.Errorf("pageload: HAR %s: %w", name, err)
	}
	type entry struct {
		start, end time.Time
		host       string
		size       int64
		url        string
		typ        Type
	}
	var entries []entry
	for i, e := range h.Log.Entries {
		if e.Request.Method != "" && e.Request.Method != "GET" || e.Response.Status == 0 {
			continue // not a page fetch, or never answered (blocked, cancelled)
		}
		u, err := url.Parse(e.Request.URL)
		if err != nil || u.Host == "" {
			return Workload{}, fmt.Errorf("pageload: HAR %s: entry %d: bad URL %q", name, i, e.Request.URL)
		}
		if e.StartedDateTime.IsZero() || !(e.Time >= 0 && e.Time <= maxEntryMS) {
			return Workload{}, fmt.Errorf("pageload: HAR %s: entry %d: no start time, or a duration not in 0 to %g ms", name, i, float64(maxEntryMS))
		}
		size := e.Response.BodySize
		if size < 0 { // -1: unknown
			size = max(e.Response.Content.Size, 0)
		}
		start := e.StartedDateTime
		entries = append(entries, entry{start, start.Add(time.Duration(e.Time * float64(time.Millisecond))),
			u.Hostname(), size, e.Request.URL, TypeOf(e.Response.Content.MimeType)})
	}
	if len(entries) == 0 {
		return Workload{}, fmt.Errorf("pageload: HAR %s: no GET entries with a response", name)
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return a.start.Compare(b.start) })
	starts := make([]time.Time, len(entries))
	ends := make([]time.Time, len(entries))
	for i, e := range entries {
		starts[i], ends[i] = e.start, e.end
	}
	deps := frontierDeps(starts, ends)
	w := Workload{Name: name}
	hosts := map[string]int{}
	for i, e := range entries {
		h, ok := hosts[e.host]
		if !ok {
			h = len(hosts)
			hosts[e.host] = h
		}
		w.Objects = append(w.Objects, Object{Host: h, Size: e.size, Name: e.url, Deps: deps[i], Type: e.typ})
	}
	return w, w.Validate()
}

// frontierDeps gives, for entries sorted by start, each entry i's
// dependencies: of the set P(i) of earlier entries that ended by the time
// i started, those not waited for through another member. With M the
// member of P(i) that started last (the highest index), a member j < M is
// waited for through M exactly when it ended by the time M started (it is
// then in P(M); starts only grow with the index, so no other member can do
// better); M itself is always needed. So the frontier is M and the members
// that ended after M started: the requests in flight when M started, a
// handful, however long the page. Near-linear: each entry enters the set
// once (a heap by end time) and leaves the frontier once.
func frontierDeps(starts, ends []time.Time) [][]int {
	deps := make([][]int, len(starts))
	var pending endHeap // started, not yet ended by the current start
	pending.ends = ends
	var frontier []int
	last := -1 // M: the member of the set with the highest index
	for i := range starts {
		for pending.Len() > 0 && !ends[pending.idx[0]].After(starts[i]) {
			j := heap.Pop(&pending).(int)
			switch {
			case j > last:
				last = j
				kept := frontier[:0]
				for _, k := range frontier {
					if ends[k].After(starts[last]) {
						kept = append(kept, k)
					}
				}
				frontier = append(kept, j)
			case ends[j].After(starts[last]):
				frontier = append(frontier, j)
			}
		}
		if len(frontier) > 0 {
			deps[i] = slices.Sorted(slices.Values(frontier))
		}
		heap.Push(&pending, i)
	}
	return deps
}

// endHeap is a min-heap of entry indices by end time (then index).
type endHeap struct {
	idx  []int
	ends []time.Time
}

func (h endHeap) Len() int { return len(h.idx) }
func (h endHeap) Less(a, b int) bool {
	if c := h.ends[h.idx[a]].Compare(h.ends[h.idx[b]]); c != 0 {
		return c < 0
	}
	return h.idx[a] < h.idx[b]
}
func (h endHeap) Swap(a, b int) { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *endHeap) Push(x any)   { h.idx = append(h.idx, x.(int)) }
func (h *endHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}
