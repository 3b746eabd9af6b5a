package policy

import (
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/sockintents/intents"
)

// Hash spreads destinations over paths by a hash of host and port, so one
// destination always uses the same path while the paths stay the same
// (PERM's hashing baseline).
type Hash struct{}

// Decide starts at the path the destination hashes to.
func (Hash) Decide(req *intents.Request, d *intents.Decision) {
	n := len(req.Paths)
	if n == 0 {
		d.Reason = "hash: no paths"
		return
	}
	h := fnv.New32a()
	h.Write([]byte(req.Dest.Host))
	h.Write([]byte{byte(req.Dest.Port >> 8), byte(req.Dest.Port)})
	first := int(h.Sum32() % uint32(n))
	for i := range n {
		d.Choices = append(d.Choices, intents.Choice{Path: req.Paths[(first+i)%n]})
	}
	d.Reason = "hash: " + req.Dest.Host + " → " + req.Paths[first].Name
}

// LoadBalance picks the path with the fewest active connections (PERM's
// load-balancing baseline); ties keep preference order.
type LoadBalance struct{}

// Decide orders the paths by active connections.
func (LoadBalance) Decide(req *intents.Request, d *intents.Decision) {
	paths := slices.Clone(req.Paths)
	active := make(map[*intents.Path]int, len(paths))
	for _, p := range paths {
		active[p] = p.Estimate().Active
	}
	slices.SortStableFunc(paths, func(a, b *intents.Path) int { return active[a] - active[b] })
	for _, p := range paths {
		d.Choices = append(d.Choices, intents.Choice{Path: p})
	}
	if len(paths) > 0 {
		d.Reason = "loadbalance: " + paths[0].Name + " has " + strconv.Itoa(active[paths[0]]) + " active"
	}
}

// First asks each policy in turn and takes the first that chooses
// anything: a fallback chain.
type First []intents.Policy

// Decide returns the first non-empty decision.
func (f First) Decide(req *intents.Request, d *intents.Decision) {
	for _, p := range f {
		p.Decide(req, d)
		if len(d.Choices) > 0 {
			return
		}
	}
}
