// Package pageload describes web pages as workloads (the Socket Intents
// paper's handcrafted pages, or pages recorded by a browser as HAR files)
// and loads them like a browser does: dependencies first, at most 6
// connections per host and 17 in all, recording when and over which path
// each object arrived.
package pageload

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Object is one resource of a page.
type Object struct {
	Host int   // which server (0 to Workload.Hosts()-1)
	Size int64 // body bytes
	// Deps are the indices of the objects that must have arrived before
	// this one is requested; always lower than the object's own index.
	Deps []int
	// Name says where it came from: the URL of a HAR entry, or a label.
	Name string
	// Type is what a browser fetches it as (see Site); the handcrafted
	// pages' objects are images.
	Type Type
}

// Type is the kind of resource an object is, as a browser fetches it.
type Type string

// The types a Site serves. Anything else (fonts, data, frames) loads as
// TypeOther, fetched as an image is: a browser asks for it and discards
// what it cannot decode.
const (
	TypeOther      Type = ""
	TypeImage      Type = "image"
	TypeScript     Type = "script"
	TypeStylesheet Type = "stylesheet"
)

// TypeOf maps a MIME type (as a HAR entry's content.mimeType) to a Type.
func TypeOf(mime string) Type {
	mime, _, _ = strings.Cut(strings.ToLower(mime), ";")
	mime = strings.TrimSpace(mime)
	switch {
	case strings.HasPrefix(mime, "image/"):
		return TypeImage
	case mime == "text/css":
		return TypeStylesheet
	case strings.Contains(mime, "javascript"), strings.Contains(mime, "ecmascript"):
		return TypeScript
	}
	return TypeOther
}

// Workload is a page: its objects in start order, the root first.
type Workload struct {
	Name    string
	Objects []Object
}

// RootSize is the size of the handcrafted pages' root HTML object.
const RootSize = 10_000

// Uniform is the paper's handcrafted page of n objects of one size, spread
// round robin over hosts servers, after a root object on the first.
func Uniform(n int, size int64, hosts int) Workload {
	return Mixed(fmt.Sprintf("%d×%s", n, FormatSize(size)), hosts, Part{n, size})
}

// Part is a number of objects of one size.
type Part struct {
	N    int
	Size int64
}

// Mixed is a handcrafted page of several parts after the root object.
func Mixed(name string, hosts int, parts ...Part) Workload {
	hosts = max(hosts, 1)
	w := Workload{Name: name, Objects: []Object{{Size: RootSize, Name: "root"}}}
	for _, p := range parts {
		for range p.N {
			i := len(w.Objects)
			w.Objects = append(w.Objects, Object{Host: (i - 1) % hosts, Size: p.Size, Deps: []int{0},
				Name: fmt.Sprintf("obj%d", i), Type: TypeImage})
		}
	}
	return w
}

// The paper's mixed pages.
var (
	Mixed1 = []Part{{16, 1_000}, {8, 10_000}, {4, 100_000}}
	Mixed2 = []Part{{32, 1_000}, {16, 10_000}, {2, 100_000}, {2, 200_000}}
)

// Parse reads a workload spec: "NxSIZE" (e.g. "32x100KB"), "mixed1",
// "mixed2", or the path of a HAR file (ending in .har). hosts spreads the
// handcrafted pages' objects over that many servers; a HAR file brings its
// own hosts.
func Parse(spec string, hosts int) (Workload, error) {
	switch {
	case spec == "mixed1":
		return Mixed("mixed1", hosts, Mixed1...), nil
	case spec == "mixed2":
		return Mixed("mixed2", hosts, Mixed2...), nil
	case strings.HasSuffix(spec, ".har"):
		return ReadHARFile(spec)
	}
	n, size, ok := strings.Cut(strings.ToLower(spec), "x")
	if !ok {
		return Workload{}, fmt.Errorf("pageload: workload %q: want NxSIZE, mixed1, mixed2 or FILE.har", spec)
	}
	count, err := strconv.Atoi(n)
	if err != nil || count < 1 {
		return Workload{}, fmt.Errorf("pageload: workload %q: bad object count", spec)
	}
	bytes, err := ParseSize(size)
	if err != nil {
		return Workload{}, fmt.Errorf("pageload: workload %q: %w", spec, err)
	}
	return Uniform(count, bytes, hosts), nil
}

// ParseSize reads "100KB", "1MB", "1000" (powers of 1000).
func ParseSize(s string) (int64, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int64(n * float64(mult)), nil
}

// FormatSize writes sizes the way Parse reads them: 1KB, 100KB, 1MB.
func FormatSize(n int64) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dMB", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dKB", n/1e3)
	}
	return fmt.Sprintf("%dB", n)
}

// Bytes is the page's total body size.
func (w Workload) Bytes() int64 {
	var n int64
	for _, o := range w.Objects {
		n += o.Size
	}
	return n
}

// Hosts is the number of servers the page uses.
func (w Workload) Hosts() int {
	n := 0
	for _, o := range w.Objects {
		n = max(n, o.Host+1)
	}
	return n
}

// Levels is the length of the longest dependency chain: the number of
// request round trips a load needs one after the other.
func (w Workload) Levels() int {
	level := make([]int, len(w.Objects))
	most := 0
	for i, o := range w.Objects {
		level[i] = 1
		for _, d := range o.Deps {
			level[i] = max(level[i], level[d]+1)
		}
		most = max(most, level[i])
	}
	return most
}

// Validate checks that every dependency points to an earlier object and
// every host and size is sane.
func (w Workload) Validate() error {
	if len(w.Objects) == 0 {
		return fmt.Errorf("pageload: workload %q has no objects", w.Name)
	}
	for i, o := range w.Objects {
		if o.Host < 0 || o.Size < 0 {
			return fmt.Errorf("pageload: workload %q: object %d: negative host or size", w.Name, i)
		}
		for _, d := range o.Deps {
			if d < 0 || d >= i {
				return fmt.Errorf("pageload: workload %q: object %d depends on %d, not an earlier object", w.Name, i, d)
			}
		}
	}
	return nil
}

// LowerBound is the fastest the page could load over paths whose smallest
// round-trip time is rtt and whose rates sum to rate (bit/s): a handshake
// round trip, then for the worst object X the dependency chain up to X
// (each object a request round trip and its bytes at the summed rate) plus
// a round trip and the bytes of everything that has to wait for X. Objects
// that must wait for X cannot be requested before it arrived; all the
// page's bytes share the summed rate. Headers and slow start are left out,
// so every real load takes longer.
func (w Workload) LowerBound(rtt time.Duration, rate float64) time.Duration {
	n := len(w.Objects)
	xfer := func(b int64) time.Duration { return time.Duration(float64(b) * 8 / rate * float64(time.Second)) }
	chain := make([]time.Duration, n)
	for y, o := range w.Objects {
		for _, d := range o.Deps {
			chain[y] = max(chain[y], chain[d])
		}
		chain[y] += rtt + xfer(o.Size)
	}
	waiting := w.waitingBytes()
	worst := rtt + xfer(w.Bytes()) // X = the page's start
	for x := range n {
		t := chain[x]
		if waiting[x] > 0 {
			t += rtt + xfer(waiting[x])
		}
		worst = max(worst, t)
	}
	return rtt + worst
}

// waitingBytes is, for each object x, the bytes of the objects that wait
// for x, directly or not. It takes the objects 64 at a time: for each
// later object a word says which of the 64 it waits for, from its
// dependencies' words. O(n/64 · (n + edges)) time and O(n) memory, where
// a matrix of who waits for whom would take n² of both.
func (w Workload) waitingBytes() []int64 {
	n := len(w.Objects)
	waiting := make([]int64, n)
	below := make([]uint64, n)
	for base := 0; base < n; base += 64 {
		clear(below[base:])
		for y := base + 1; y < n; y++ {
			var word uint64
			for _, d := range w.Objects[y].Deps {
				if d >= base {
					word |= below[d]
					if d < base+64 {
						word |= 1 << (d - base)
					}
				}
			}
			below[y] = word
			for word != 0 {
				x := bits.TrailingZeros64(word)
				waiting[base+x] += w.Objects[y].Size
				word &= word - 1
			}
		}
	}
	return waiting
}
