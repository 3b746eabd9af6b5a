package intents

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"
)

// decision is a policy's answer, checked against the intents: every path
// in it is permitted, every Reuse points into the candidates it was given,
// and a "system routing" choice is replaced by the permitted paths when the
// intents constrain paths (the OS might route onto an excluded one).
type decision struct {
	choices   []Choice
	reason    string
	intent    Multipath // MultipathUnspecified also for "off": no MPTCP then
	permitted []*Path
	excl      []Exclusion
}

func (d *decision) noPath(dest Destination, why string) error {
	excl := d.excl
	if why != "" {
		excl = append(slices.Clip(excl), Exclusion{Path: "*", Reason: why})
	}
	return &NoPathError{Dest: net.JoinHostPort(dest.Host, strconv.Itoa(int(dest.Port))), Excluded: excl}
}

// query is what a decision is asked: for a request with intents in to
// dest, the pooled connections there (cands), the paths that already
// failed it (skip), and the bytes queued behind it (see Request.Queued).
// sizeSource says where in.SizeToBeReceived came from, if not from the
// caller (see DecisionInfo.SizeSource).
type query struct {
	in         *Intents
	sizeSource sizeSource
	dest       Destination
	loopback   hostHint // whether dest.Host is a loopback host, if known
	cands      []Candidate
	skip       []*Path
	queued     int64
	guessed    bool // queued is a closed-loop caller's guessed backlog (see closedLoops)
}

// permitPaths sets d's permitted paths and their exclusions: the intents'
// permissions, less the paths that already failed this request (skip)
// and, while another path may carry it, those that went silent (which
// it reports).
func (d *decision) permitPaths(m *Manager, in *Intents, dest Destination, skip []*Path) (silenced bool) {
	d.permitted, d.excl = permit(in, m.Paths(), networkFamily(dest.Network), false)
	d.permitted = slices.DeleteFunc(d.permitted, func(p *Path) bool {
		if slices.Contains(skip, p) {
			d.excl = append(d.excl, Exclusion{Path: p.Name, Reason: "failed for this request"})
			return true
		}
		return false
	})
	if slices.ContainsFunc(d.permitted, responsive) {
		// A path that went silent is left out while another may carry the
		// request; with none other it is tried, which may show it is back.
		d.permitted = slices.DeleteFunc(d.permitted, func(p *Path) bool {
			if !responsive(p) {
				silenced = true
				d.excl = append(d.excl, Exclusion{Path: p.Name, Reason: "unresponsive (carried nothing while data was owed; probed until it answers)"})
				return true
			}
			return false
		})
	}
	return silenced
}

// visibleCandidates are the pooled connections a policy may see: those on
// a permitted path, and those the OS routed where it may route (cands
// itself, not a copy, when all are).
func visibleCandidates(cands []Candidate, permitted []*Path, bindSystem bool) []Candidate {
	visible := func(c *Candidate) bool {
		return (c.Path == nil && !bindSystem) || (c.Path != nil && slices.Contains(permitted, c.Path))
	}
	for i := range cands {
		if !visible(&cands[i]) {
			var shown []Candidate
			for j := range cands {
				if visible(&cands[j]) {
					shown = append(shown, cands[j])
				}
			}
			return shown
		}
	}
	return cands
}

// takeChoices keeps of a policy's choices those it may make: a reuse of
// a shown candidate, a path permitted, the OS's routing where that is
// safe (else the permitted paths in preference order), a wait.
func (d *decision) takeChoices(choices []Choice, shown []Candidate, bindSystem bool) {
	for _, c := range choices {
		switch {
		case c.Wait:
			d.choices = append(d.choices, Choice{Wait: true})
		case c.Reuse != nil:
			if i := candidateIndex(shown, c.Reuse); i >= 0 {
				d.choices = append(d.choices, Choice{Reuse: &shown[i]})
			}
		case c.Path == nil && bindSystem:
			// The OS might route onto a path that may not be used: bind
			// to the permitted paths in preference order instead.
			for _, p := range d.permitted {
				d.choices = append(d.choices, Choice{Path: p, MPTCP: c.MPTCP, Fresh: c.Fresh})
			}
		case c.Path == nil || slices.Contains(d.permitted, c.Path):
			d.choices = append(d.choices, c)
		}
	}
}

// hostHint is what a caller knows of a host: whether it is a loopback
// host, or nothing (the zero value).
type hostHint uint8

const (
	hostUnknown hostHint = iota
	hostLoopback
	hostNotLoopback
)

func loopbackHint(loopback bool) hostHint {
	if loopback {
		return hostLoopback
	}
	return hostNotLoopback
}

// is reports whether host is a loopback host, parsing it only if h does
// not say.
func (h hostHint) is(host string) bool {
	switch h {
	case hostLoopback:
		return true
	case hostNotLoopback:
		return false
	}
	return isLoopbackHost(host)
}

// candidateIndex finds c among cands: by address, as Request.Candidates
// hands them out, or by ID, so that a policy answering with a pointer to
// a copy (a loop variable's address, say) still gets the connection it
// meant instead of having its choice dropped.
func candidateIndex(cands []Candidate, c *Candidate) int {
	for i := range cands {
		if &cands[i] == c {
			return i
		}
	}
	for i := range cands {
		if cands[i].ID == c.ID {
			return i
		}
	}
	return -1
}

// appendPath appends c unless its path is already chosen.
func appendPath(cs []Choice, c Choice) []Choice {
	for _, x := range cs {
		if x.Path == c.Path {
			return cs
		}
	}
	return append(cs, c)
}

// DecisionInfo is one decision with its inputs, for tracing.
type DecisionInfo struct {
	Intents Intents
	// SizeSource says where Intents.SizeToBeReceived came from:
	// "intents" (the caller's), "url" (the URL's last response), "origin"
	// (its origin's median), "recent" (the median of recent responses from
	// any origin), "response" (the arriving response's Content-Length,
	// less what arrived: see Mover); "": unknown.
	SizeSource string
	Dest       Destination
	Permitted  []*Path     // the paths the policy was offered
	Excluded   []Exclusion // and why the others were not
	Candidates []Candidate // the pooled connections to Dest
	// Queued is the policy's Request.Queued; QueueGuessed says it is a
	// guess of what a caller that queues its own requests holds back.
	Queued       int64
	QueueGuessed bool
	Choices      []Choice // what was decided, best first
	Reason       string   // the policy's reason
	Err          error    // why nothing could be chosen, if so
	// Moving, if set, is the connection a response arrives on, and the
	// decision is whether to move it (see Mover): Choices then hold the
	// new connection it moves to, or nothing if it stays.
	Moving *Candidate
	// SplitPart, with Moving and a choice, is the number of the
	// response's last bytes fetched on the chosen path while the first
	// ones keep arriving on Moving (see Splitter); 0 for a move.
	SplitPart int64
}

type traceKey struct{}

// WithDecisionTrace returns a context whose decisions (of a dial, or of
// each attempt of a request) are reported to f, like httptrace for path
// selection. f runs synchronously, outside the pool's lock, and should not
// block: the request waits for it.
func WithDecisionTrace(ctx context.Context, f func(DecisionInfo)) context.Context {
	return context.WithValue(ctx, traceKey{}, f)
}

// decisionTrace combines the context's trace and the manager's logger.
func decisionTrace(ctx context.Context, m *Manager) func(DecisionInfo) {
	f, _ := ctx.Value(traceKey{}).(func(DecisionInfo))
	log := m.debugLogger(ctx)
	if f == nil && log == nil {
		return nil
	}
	return func(di DecisionInfo) {
		if f != nil {
			f(di)
		}
		if log != nil {
			choices := make([]string, len(di.Choices))
			for i, c := range di.Choices {
				choices[i] = c.String()
			}
			log.LogAttrs(ctx, slog.LevelDebug, "intents decision",
				slog.String("dest", net.JoinHostPort(di.Dest.Host, strconv.Itoa(int(di.Dest.Port)))),
				slog.String("intents", di.Intents.String()),
				slog.Int("permitted", len(di.Permitted)), slog.Int("candidates", len(di.Candidates)),
				slog.Any("choices", choices), slog.String("reason", di.Reason), slog.Any("err", di.Err),
				slog.String("queued", queuedString(di.Queued, di.QueueGuessed)),
				slog.String("paths", estimatesOf(di.Permitted)))
		}
	}
}

// queuedString is a decision's queued load for the debug log: "0B",
// "300KB", or "~300KB" for a guess.
func queuedString(n int64, guessed bool) string {
	if guessed {
		return "~" + formatBytes(n)
	}
	return formatBytes(n)
}

// responsive reports whether p is not marked as carrying nothing (see
// Estimate.Unresponsive).
func responsive(p *Path) bool { return p.est == nil || !p.est.Unresponsive() }

// estimatesOf writes the paths' estimates as a decision is logged, for
// the debug log: what the policy weighed (RTT, "?" if unknown; capacity,
// "≥" where it is only a floor; active connections; bytes pending).
func estimatesOf(paths []*Path) string {
	var b []byte
	for i, p := range paths {
		if i > 0 {
			b = append(b, "; "...)
		}
		e := p.Estimate()
		rtt, floor := "?", ""
		if e.RTT > 0 {
			rtt = e.RTT.Round(100 * time.Microsecond).String()
		}
		if e.BandwidthFloor {
			floor = "≥"
		}
		b = fmt.Appendf(b, "%s rtt=%s capacity=%s%.2fMbit/s active=%d pending=%dB",
			p.Name, rtt, floor, float64(e.Bandwidth)/1e6, e.Active, e.Pending)
	}
	return string(b)
}
