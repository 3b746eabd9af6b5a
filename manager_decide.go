package intents

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
)

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
				src = sizeFromIntents
			}
			trace(DecisionInfo{Intents: *q.in, SizeSource: string(src), Dest: q.dest, Permitted: d.permitted, Excluded: d.excl,
				Candidates: slices.Clone(q.cands), Queued: q.queued, QueueGuessed: q.guessed, Choices: slices.Clone(d.choices), Reason: d.reason, Err: err})
		}()
	}
	return m.decideUntraced(q, trace != nil, buf)
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

// debugLogger is the manager's logger if it logs at debug level, else nil.
func (m *Manager) debugLogger(ctx context.Context) *slog.Logger {
	if m == nil || m.cfg.Logger == nil || !m.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	return m.cfg.Logger
}

// mover is the Manager's policy if it moves responses.
func (m *Manager) mover() Mover {
	if m == nil {
		return nil
	}
	mv, _ := m.cfg.Policy.(Mover)
	return mv
}

// moveTarget asks the policy whether the response arriving on from, with
// in.SizeToBeReceived bytes still to come, should move, and where to: nil
// to stay. If its rest could be split (splitFits is set), a Splitter is
// asked first whether to split it: part > 0 then says to fetch the last
// part bytes (at most splitRoom) on to, which splitFits allows. It
// returns the paths the request may use too.
func (m *Manager) moveTarget(ctx context.Context, in *Intents, dest Destination, cands []Candidate, queued int64, from uint64, splitFits func(*Path) bool, splitRoom int64) (to *Path, part int64, permitted []*Path) {
	mv := m.mover()
	if mv == nil {
		return nil, 0, nil
	}
	permitted, excl := permit(in, m.Paths(), networkFamily(dest.Network), false)
	shown := slices.DeleteFunc(cands, func(c Candidate) bool { return c.Path == nil || !slices.Contains(permitted, c.Path) })
	i := slices.IndexFunc(shown, func(c Candidate) bool { return c.ID == from })
	if i < 0 || len(permitted) < 2 {
		return nil, 0, nil // its path is no longer permitted (gone down, say), or there is nowhere else
	}
	trace := decisionTrace(ctx, m)
	req := Request{Intents: *in, Dest: dest, Paths: permitted, Candidates: shown, Queued: queued, Explain: trace != nil}
	var reason string
	if sp, ok := mv.(Splitter); ok && splitFits != nil {
		// A split first: where it applies, the path the response is on
		// keeps carrying, which a move would give up.
		to, part, reason = sp.Split(&req, &shown[i])
		if part = splitPartOf(part, in.SizeToBeReceived, splitRoom); part == 0 || to == shown[i].Path || !slices.Contains(permitted, to) {
			to, part = nil, 0
		} else if !splitFits(to) {
			to, part = nil, 0
			reason += " (no connection there now: whole)"
		}
	}
	if to == nil {
		var why string
		to, why = mv.Move(&req, &shown[i])
		if to == shown[i].Path || !slices.Contains(permitted, to) {
			to = nil
		}
		if reason != "" {
			why = reason + "; " + why
		}
		reason = why
	}
	if trace != nil {
		var choices []Choice
		if to != nil {
			choices = []Choice{{Path: to, Fresh: true}}
		}
		moving := shown[i]
		trace(DecisionInfo{Intents: *in, SizeSource: string(sizeFromResponse), Dest: dest, Permitted: permitted, Excluded: excl,
			Candidates: slices.Clone(shown), Choices: choices, Reason: reason, Moving: &moving, SplitPart: part})
	}
	return to, part, permitted
}
