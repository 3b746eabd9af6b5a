package pageload

import (
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
					Size int64 `json:"size"`
				} `json:"content"`
			} `json:"response"`
		} `json:"entries"`
	} `json:"log"`
}

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
// unknown). Hosts are numbered in the order they first appear.
//
// Dependencies follow the Socket Intents paper's conservative heuristic:
// an object depends on every object that had finished before it started.
// That keeps the recorded order and never starts an object earlier than
// the browser could have.
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
		if e.StartedDateTime.IsZero() || e.Time < 0 {
			return Workload{}, fmt.Errorf("pageload: HAR %s: entry %d: no start time or negative duration", name, i)
		}
		size := e.Response.BodySize
		if size < 0 { // -1: unknown
			size = max(e.Response.Content.Size, 0)
		}
		start := e.StartedDateTime
		entries = append(entries, entry{start, start.Add(time.Duration(e.Time * float64(time.Millisecond))),
			u.Hostname(), size, e.Request.URL})
	}
	if len(entries) == 0 {
		return Workload{}, fmt.Errorf("pageload: HAR %s: no GET entries with a response", name)
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return a.start.Compare(b.start) })
	w := Workload{Name: name}
	hosts := map[string]int{}
	for i, e := range entries {
		h, ok := hosts[e.host]
		if !ok {
			h = len(hosts)
			hosts[e.host] = h
		}
		o := Object{Host: h, Size: e.size, Name: e.url}
		for j := range i {
			if !entries[j].end.After(e.start) {
				o.Deps = append(o.Deps, j)
			}
		}
		w.Objects = append(w.Objects, o)
	}
	return w, w.Validate()
}
