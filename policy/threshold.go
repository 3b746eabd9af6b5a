package policy

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sockintents/intents"
)

// Threshold is the Socket Intents prototype's final policy, as we read it:
// on the path with the lowest RTT it weighs the latency part of a transfer
// (its set-up round trips) against the capacity part (size over the path's
// free capacity). While latency dominates, that path serves; once capacity
// dominates, the path with the most free capacity does. Without a size
// hint, latency dominates.
type Threshold struct {
	Model
}

// Decide picks the lowest-RTT or the highest-capacity path first.
func (th *Threshold) Decide(req *intents.Request, d *intents.Decision) {
	if len(req.Paths) == 0 {
		d.Reason = "threshold: no paths"
		return
	}
	byRTT := slices.Clone(req.Paths)
	slices.SortStableFunc(byRTT, func(a, b *intents.Path) int {
		return cmp.Compare(th.path(a).rtt, th.path(b).rtt)
	})
	low := th.path(byRTT[0])
	latency := th.setupRTTs(true, req.Dest.TLS) * low.rtt
	capacity := float64(req.Intents.SizeToBeReceived) / low.free
	order := byRTT
	what := "latency"
	if capacity > latency {
		order = slices.Clone(req.Paths)
		slices.SortStableFunc(order, func(a, b *intents.Path) int {
			return cmp.Compare(th.path(b).free, th.path(a).free)
		})
		what = "capacity"
	}
	for _, p := range order {
		d.Choices = append(d.Choices, intents.Choice{Path: p})
	}
	d.Reason = fmt.Sprintf("threshold: %s dominates on %s (latency %.0f ms, capacity %.0f ms) → %s",
		what, byRTT[0].Name, latency*1000, capacity*1000, order[0].Name)
}
