package intents

import (
	"context"
	"net/http"
	"slices"
	"time"
)

// firstRacePaths returns the two paths to race req on, if it is a first
// request to race (see racePaths), and claims the Transport's one race.
// Each of the two paths is marked as raced over: what the race shows is
// in their estimates, and neither this Transport nor another of the
// Manager's, nor one of a process started from its Knowledge, races
// again on those networks.
func (t *Transport) firstRacePaths(req *http.Request, in *Intents) (a, b *Path, ok bool) {
	a, b, ok = t.racePaths(req, in)
	if !ok || !t.raceOver.CompareAndSwap(false, true) {
		return nil, nil, false
	}
	for _, p := range []*Path{a, b} {
		if p.est != nil {
			p.est.MarkRaced()
		}
	}
	return a, b, true
}

// racePaths returns the two paths to race req on, if it is a first
// request to race (see above): a GET or HEAD without a body or an
// upgrade, not asking for MPTCP, not moving, to an origin not on
// loopback; while no path of the Manager has a capacity shown or
// remembered, nor was raced over; if the policy is a Racer and says so,
// on the first two paths among its choices for it, neither avoided by
// the intents nor expensive. Once a path has shown its capacity no
// request races, and asking costs an atomic load; with a policy that is
// not a Racer, a type assertion.
func (t *Transport) racePaths(req *http.Request, in *Intents) (a, b *Path, ok bool) {
	m := t.Manager
	if t.DisableFirstRace || t.raceOver.Load() || m == nil || req.URL == nil ||
		(req.Method != "" && req.Method != http.MethodGet && req.Method != http.MethodHead) ||
		hasBody(req) || req.Header.Get("Upgrade") != "" || in.Multipath > MultipathOff {
		return nil, nil, false
	}
	racer, ok := m.cfg.Policy.(Racer)
	if !ok {
		return nil, nil, false
	}
	for _, p := range m.Paths() {
		if p.Estimate().Bandwidth > 0 || (p.est != nil && p.est.Raced()) {
			// A capacity shown or remembered: the policy weighs it. Or a
			// race run there, by this process or one before whose
			// knowledge it has: what it showed is all a race would.
			t.raceOver.Store(true)
			return nil, nil, false
		}
	}
	o, err := t.originOf(req.URL)
	if err != nil || o.loopback {
		return nil, nil, false
	}
	dest := Destination{Network: "tcp", Host: o.host, Port: o.port, TLS: o.scheme == "https"}
	d, err := m.decideUntraced(query{in: in, dest: dest, loopback: hostNotLoopback}, false, nil)
	if err != nil || !racer.RacesFirst(&Request{Intents: *in, Dest: dest, Paths: d.permitted}) {
		return nil, nil, false
	}
	var two []*Path
	for _, c := range d.choices {
		p := c.Path
		if c.Reuse != nil {
			p = c.Reuse.Path
		}
		if p == nil || c.MPTCP || slices.Contains(two, p) {
			continue
		}
		// Not raceable's rule for a dial: a request raced costs its
		// bytes, which a Resilience intent does not make worth paying
		// on a path the intents avoid or that costs.
		if l, _ := effectiveLevel(in, p); l == LevelAvoid || p.Expensive {
			continue
		}
		if two = append(two, p); len(two) == 2 {
			break
		}
	}
	if len(two) < 2 {
		return nil, nil, false
	}
	return two[0], two[1], true
}

// raceFirst sends req on paths a and b at once and returns the response
// whose body is in first (or whose first raceBodyBytes are; a response of
// unknown length, which may stream for ever, wins as its headers come; a
// body that keeps both waiting raceBodyWait after the first headers, the
// one with more of it). What the other's loss showed is noted (see
// lostRace), and it is cancelled: left to bring its body, it would hold
// its path's queue for the page's next objects. If one fails, the other
// is the answer; if both do, the error of the one that failed first.
func (t *Transport) raceFirst(req *http.Request, in Intents, a, b *Path) (*http.Response, error) {
	start := time.Now()
	var es [2]*entrant
	for i, p := range [2]*Path{a, b} {
		ctx, cancel := context.WithCancel(req.Context())
		if i > 0 {
			ctx = untraced{ctx} // the caller's trace sees one request
		}
		e := &entrant{raceEntry: raceEntry{path: p}, cancel: cancel, headers: make(chan struct{}), done: make(chan struct{})}
		e.held.Store(true)
		es[i] = e
		r := req.Clone(context.WithValue(ctx, raceKey{}, &e.raceEntry))
		go func() {
			defer close(e.done)
			e.resp, e.err = t.roundTripWith(r, in, nil)
			close(e.headers)
			if e.err == nil {
				e.readHead()
			}
		}()
	}
	var failed []*entrant
	headers := [2]<-chan struct{}{es[0].headers, es[1].headers}
	done := [2]<-chan struct{}{es[0].done, es[1].done}
	var wait <-chan time.Time
	for {
		select {
		case <-headers[0]:
			headers[0], wait = nil, startWait(wait)
			continue
		case <-headers[1]:
			headers[1], wait = nil, startWait(wait)
			continue
		case <-done[0]:
			done[0] = nil
			if !es[0].failed() {
				return t.raceWon(req, es[0], es[1], start), nil
			}
			failed = append(failed, es[0])
		case <-done[1]:
			done[1] = nil
			if !es[1].failed() {
				return t.raceWon(req, es[1], es[0], start), nil
			}
			failed = append(failed, es[1])
		case <-wait:
			wait = nil
			// The one with more of its body, of those with a response.
			var w *entrant
			for i, e := range es {
				if headers[i] == nil && done[i] != nil && e.err == nil && (w == nil || e.read.Load() > w.read.Load()) {
					w = e
				}
			}
			if w != nil {
				w.stop.Store(true)
				other := es[0]
				if other == w {
					other = es[1]
				}
				return t.raceWon(req, w, other, start), nil
			}
		}
		if len(failed) == 2 {
			return nil, failed[0].cause()
		}
	}
}

// raceWon ends a race that w won: the other is cancelled (and what its
// loss showed noted, if it was still under way), its response closed once
// it ends; w's response is the caller's, its body the start read in the
// race and then the rest.
func (t *Transport) raceWon(req *http.Request, w, other *entrant, start time.Time) *http.Response {
	select {
	case <-other.done:
		other.discard()
	default:
		lostRace(other.path, w.path, w.read.Load(), time.Since(start), req.URL.Scheme == "https")
		other.cancel()
		go func() {
			<-other.done
			other.discard()
		}()
	}
	w.held.Store(false)
	resp := w.resp
	resp.Request = req
	resp.Body = &racedBody{e: w, rest: resp.Body}
	return resp
}
