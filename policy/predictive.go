package policy

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/sockintents/intents"
)

// Predictive is a PERM-style predictive scheduler. It predicts each path's
// transfer time from the recent active probes (Estimate.ProbeRTT, see
// intents.Config.ProbeTarget; the passive RTT estimate where there are none) and
// the measured capacity. Light flows (below HeavySize, or of unknown size)
// go where they themselves finish first (min-total, with the Model's
// set-up and slow start); heavy flows go where all the bytes expected on a
// path, theirs included, finish first (min-max: the path's pending bytes
// plus this flow's, over its capacity), which spreads bulk transfers over
// the paths by capacity.
type Predictive struct {
	Model
	// HeavySize separates light from heavy flows (default 1 MB).
	HeavySize int64
}

// Decide orders the paths by predicted completion.
func (pr *Predictive) Decide(req *intents.Request, d *intents.Decision) {
	heavy := pr.HeavySize
	if heavy <= 0 {
		heavy = 1e6
	}
	size := req.Intents.SizeToBeReceived
	type pred struct {
		p  *intents.Path
		at time.Duration
	}
	preds := make([]pred, 0, len(req.Paths))
	for _, p := range req.Paths {
		pm := pr.path(p)
		if probe := p.Estimate().ProbeRTT; probe > 0 {
			pm.rtt = probe.Seconds()
		}
		setup := pr.setupRTTs(true, req.Dest.TLS) * pm.rtt
		var at float64
		if size < heavy {
			at = setup + pm.transfer(float64(size), pm.iw)
		} else {
			// The capacity, not the free share: the pending bytes are the
			// other flows' claim on it.
			bw := float64(p.Estimate().Bandwidth) / 8
			if bw <= 0 {
				bw = float64(pr.params().unknownBandwidth) / 8
			}
			at = setup + float64(p.Estimate().Pending+size)/bw
		}
		preds = append(preds, pred{p, seconds(at)})
	}
	slices.SortStableFunc(preds, func(a, b pred) int { return cmp.Compare(a.at, b.at) })
	for _, x := range preds {
		d.Choices = append(d.Choices, intents.Choice{Path: x.p})
	}
	if len(preds) == 0 {
		d.Reason = "predictive: no paths"
		return
	}
	kind := "light, min-total"
	if size >= heavy {
		kind = "heavy, min-max"
	}
	d.Reason = "predictive: " + kind + " (" + strconv.FormatInt(size, 10) + " B) → " + preds[0].p.Name +
		" in " + preds[0].at.Round(time.Millisecond).String()
}
