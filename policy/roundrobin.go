package policy

import (
	"strconv"
	"sync/atomic"

	"github.com/sockintents/intents"
)

// RoundRobin spreads connections over the permitted paths in turn; the
// other paths follow as fallbacks. The zero value is ready to use; it must
// not be copied after first use.
type RoundRobin struct {
	next atomic.Uint64
}

// Decide picks the next path in turn first, then the others in order.
func (r *RoundRobin) Decide(req *intents.Request, d *intents.Decision) {
	n := uint64(len(req.Paths))
	if n == 0 {
		d.Reason = "roundrobin: no paths"
		return
	}
	first := (r.next.Add(1) - 1) % n
	for i := range n {
		d.Choices = append(d.Choices, intents.Choice{Path: req.Paths[(first+i)%n]})
	}
	d.Reason = "roundrobin: turn " + strconv.FormatUint(first, 10) + " of " + strconv.FormatUint(n, 10)
}
