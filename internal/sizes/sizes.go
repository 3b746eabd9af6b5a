// Package sizes remembers the sizes of recent transfers, per key, and
// their medians: what the Transport expects of an origin's next response
// and the proxy of a host's next tunnel, before either says.
//
// The median, the lower middle of an even count: sizes are skewed (a few
// large objects among many small ones), and a policy sends an object to a
// farther path only when it is large enough to pay for that path's round
// trips, so the guess errs small (see docs/findings.md).
package sizes

import (
	"iter"
	"slices"
)

// Recent is the last sizes given to it, up to its window, and their
// median, kept as they come: decisions read it far more often.
type Recent struct {
	ring   []int64 // the window; the newest at i-1
	n, i   int
	median int64
}

// MakeRecent returns a Recent that keeps the last window sizes.
func MakeRecent(window int) Recent { return Recent{ring: make([]int64, max(window, 1))} }

// Add takes size as the newest.
func (r *Recent) Add(size int64) {
	if r.n < len(r.ring) {
		r.n++
	}
	r.ring[r.i] = size
	r.i = (r.i + 1) % len(r.ring)
	sorted := make([]int64, 0, 64)
	sorted = append(sorted, r.ring[:r.n]...)
	slices.Sort(sorted)
	r.median = sorted[(r.n-1)/2]
}

// Len is how many sizes it holds.
func (r *Recent) Len() int { return r.n }

// Median is their median (the lower middle of an even count); 0 with none.
func (r *Recent) Median() int64 { return r.median }

// Newest returns the k-th newest size held (0: the newest); k < Len.
func (r *Recent) Newest(k int) int64 {
	return r.ring[(r.i-1-k+2*len(r.ring))%len(r.ring)]
}

// Sizes returns the sizes held, oldest first: added to a new Recent of
// the same window in that order, they make the same Recent.
func (r *Recent) Sizes() []int64 {
	out := make([]int64, r.n)
	for k := range r.n {
		out[r.n-1-k] = r.Newest(k)
	}
	return out
}

// Keyed keeps a Recent per key for at most its bound of keys: a new key
// past the bound pushes out the one first added. Not safe for concurrent
// use: its users hold their own lock.
type Keyed[K comparable] struct {
	maxKeys, window int
	m               map[K]*Recent
	order           []K // keys, first added first
}

// NewKeyed returns a Keyed of at most maxKeys keys, each keeping its last
// window sizes.
func NewKeyed[K comparable](maxKeys, window int) *Keyed[K] {
	return &Keyed[K]{maxKeys: max(maxKeys, 1), window: window, m: map[K]*Recent{}}
}

// Get returns key's sizes, nil if none.
func (k *Keyed[K]) Get(key K) *Recent { return k.m[key] }

// All yields the keys and their sizes, the first added first: added to a
// new Keyed of the same bounds in that order, they make the same Keyed.
func (k *Keyed[K]) All() iter.Seq2[K, *Recent] {
	return func(yield func(K, *Recent) bool) {
		for _, key := range k.order {
			if !yield(key, k.m[key]) {
				return
			}
		}
	}
}

// Len is how many keys it holds.
func (k *Keyed[K]) Len() int { return len(k.order) }

// Add takes size as key's newest, and returns key's sizes.
func (k *Keyed[K]) Add(key K, size int64) *Recent {
	r := k.m[key]
	if r == nil {
		if len(k.order) >= k.maxKeys {
			delete(k.m, k.order[0])
			k.order = append(k.order[:0], k.order[1:]...)
		}
		nr := MakeRecent(k.window)
		r = &nr
		k.m[key] = r
		k.order = append(k.order, key)
	}
	r.Add(size)
	return r
}
