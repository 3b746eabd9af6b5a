package intents

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
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

// decide applies in to the path table (less the paths in skip) and asks
// the policy, with cands as the pooled connections to dest. Candidates on
// paths that are not permitted are not shown to the policy. Loopback
// destinations are left to the OS (no access network is involved) unless
// loopback is prohibited.
//
// m may be nil: without path constraints in the intents, that is operating
// system routing; with them, DefaultManager decides.
//
// The choices are appended to buf[:0] (nil: a new slice): a caller that
// decides often passes scratch space of its own. The trace gets copies,
// since it may keep them.
func (m *Manager) decide(ctx context.Context, q query, buf []Choice) (d decision, err error) {
	trace := decisionTrace(ctx, m)
	if trace != nil {
		defer func() {
			src := q.sizeSource
			if src == "" && q.in.SizeToBeReceived > 0 {
				src = SizeFromIntents
			}
			trace(DecisionInfo{Intents: *q.in, SizeSource: src, Dest: q.dest, Permitted: d.permitted, Excluded: d.excl,
				Candidates: slices.Clone(q.cands), Choices: slices.Clone(d.choices), Reason: d.reason, Err: err})
		}()
	}
	return m.decideUntraced(q, trace != nil, buf)
}

// query is what a decision is asked: for a request with intents in to
// dest, the pooled connections there (cands), the paths that already
// failed it (skip), and the bytes queued behind it (see Request.Queued).
// sizeSource says where in.SizeToBeReceived came from, if not from the
// caller (see DecisionInfo.SizeSource).
type query struct {
	in         *Intents
	sizeSource SizeSource
	dest       Destination
	loopback   hostHint // whether dest.Host is a loopback host, if known
	cands      []Candidate
	skip       []*Path
	queued     int64
}

func (m *Manager) decideUntraced(q query, explain bool, buf []Choice) (decision, error) {
	in, dest := q.in, q.dest
	d := decision{intent: in.Multipath, choices: buf[:0]}
	if d.intent == MultipathOff {
		d.intent = MultipathUnspecified
	}
	constrained := in.constrainsPaths()
	if m == nil && constrained {
		var err error
		if m, err = DefaultManager(); err != nil {
			return d, err
		}
	}
	_, loopbackName := m.loopbackAddr(dest.Host)
	loopback := q.loopback.is(dest.Host) || loopbackName
	if loopback || (m == nil && !constrained) {
		return m.decideUnbound(q, d, loopback, constrained)
	}
	silenced := d.permitPaths(m, in, dest, q.skip)
	if len(d.permitted) == 0 {
		return d, d.noPath(dest, "")
	}
	// System routing is safe only when any path may carry the request.
	bindSystem := constrained || len(m.cfg.Paths) > 0 || silenced
	shown := visibleCandidates(q.cands, d.permitted, bindSystem)
	var pd Decision
	if m.cfg.Policy == nil {
		pd.Choices, pd.Reason = []Choice{{}}, "no policy: system routing"
	} else {
		req := Request{Intents: *in, Dest: dest, Paths: d.permitted, Candidates: shown, Queued: q.queued, Explain: explain}
		m.cfg.Policy.Decide(&req, &pd)
	}
	d.reason = pd.Reason
	d.takeChoices(pd.Choices, shown, bindSystem)
	if in.Multipath == MultipathOff {
		for i := range d.choices {
			d.choices[i].MPTCP = false
		}
	}
	if len(d.choices) == 0 {
		return d, d.noPath(dest, "policy chose no permitted path: "+d.reason)
	}
	return d, nil
}

// decideUnbound is the decision for a loopback destination, or without a
// Manager and with nothing that constrains the paths: the operating
// system routes, reusing a pooled connection it routed if one is free.
func (m *Manager) decideUnbound(q query, d decision, loopback, constrained bool) (decision, error) {
	in, dest := q.in, q.dest
	if l, ok := in.Types[TypeLoopback]; ok && l == LevelProhibit {
		d.excl = []Exclusion{{Path: "loopback", Reason: "prohibited (prohibit=loopback)"}}
		return d, d.noPath(dest, "")
	}
	if loopback && constrained {
		if err := m.loopbackPermitted(in, &d, dest); err != nil {
			return d, err
		}
	}
	d.reason = "system routing"
	if loopback {
		d.reason = "loopback destination"
	}
	for i := range q.cands {
		if q.cands[i].Path == nil && q.cands[i].Available > 0 {
			d.choices = append(d.choices, Choice{Reuse: &q.cands[i]})
		}
	}
	d.choices = append(d.choices, Choice{})
	return d, nil
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

// loopbackPermitted checks the intents against the loopback paths for a
// loopback destination, which the operating system then reaches over
// loopback: a name's level wins over its type's, so prohibit=if:lo holds
// as prohibit=loopback does, and a requirement that no loopback path meets
// (require=wifi, or an interface that does not exist) cannot be met.
func (m *Manager) loopbackPermitted(in *Intents, d *decision, dest Destination) error {
	var lo []*Path
	for _, p := range m.Paths() {
		if p.Type == TypeLoopback {
			lo = append(lo, p)
		}
	}
	permitted, excl := permit(in, lo, 0, true)
	switch {
	case len(permitted) > 0:
		return nil
	case len(lo) > 0:
		d.excl = excl
		return d.noPath(dest, "")
	case requiresAny(in):
		return d.noPath(dest, "a loopback destination, and no loopback path is required")
	}
	return nil // no loopback path known: nothing to hold against the OS's
}

// loopbackAddr reports whether host is a name that the Manager's hosts
// file maps to loopback addresses only, and the first of them: the
// operating system reaches it over loopback, which no access network's
// path can.
func (m *Manager) loopbackAddr(host string) (netip.Addr, bool) {
	if m == nil || m.resolver == nil || host == "" || (host[0] >= '0' && host[0] <= '9') || host[0] == '[' || host[0] == ':' {
		return netip.Addr{}, false
	}
	m.resolver.init()
	addrs := m.resolver.hosts.lookup(host)
	for _, a := range addrs {
		if !a.IsLoopback() {
			return netip.Addr{}, false
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, false
	}
	return addrs[0], true
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
	Intents    Intents
	SizeSource SizeSource // where Intents.SizeToBeReceived came from ("": unknown)
	Dest       Destination
	Permitted  []*Path     // the paths the policy was offered
	Excluded   []Exclusion // and why the others were not
	Candidates []Candidate // the pooled connections to Dest
	Choices    []Choice    // what was decided, best first
	Reason     string      // the policy's reason
	Err        error       // why nothing could be chosen, if so
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

// debugLogger is the manager's logger if it logs at debug level, else nil.
func (m *Manager) debugLogger(ctx context.Context) *slog.Logger {
	if m == nil || m.cfg.Logger == nil || !m.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	return m.cfg.Logger
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
				slog.String("paths", estimatesOf(di.Permitted)))
		}
	}
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
