package intents

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// Moving a response to another path (see Mover). A size predicted before
// any of a page was known places a large object as a small one, and the
// path's capacity is often learned only once the page's bulk is under way:
// the Transport asks its policy again when a response's headers show it far
// larger than predicted, and then every moveCheckInterval while its body
// arrives or its connection stays quiet (see checkStall), and moves what
// the policy says would arrive sooner elsewhere.
// A move takes the old connection's place in the pool's limits (moveSlot),
// so the queue cannot take it in between and the limits hold throughout.

const (
	// moveMinBytes: an object that outgrew its prediction by less, or a
	// body with less left, arrives within a round trip or two wherever it
	// is: a new connection elsewhere costs more than that.
	moveMinBytes = 32 << 10
)

// moveCheckInterval is how often a body's move is reconsidered: the
// paths' estimates change at the pool's sampling ticks. A variable for
// tests.
var moveCheckInterval = sampleInterval

// moveTicket is a move the policy decided (moveCheck.moveTo), handed to
// the request that makes it (Transport.roundTripWith): the dial slot it
// takes in the pool's limits (moveSlot), which its first attempt opens
// and which is given back if it returns before, or the path it moves
// onto, with no slot: a request moving off a multiplexed connection
// (HTTP/3), where only its stream ends, or onto a free connection there
// (a page's tail); it then goes to a connection on onto, as the policy
// decides there.
type moveTicket struct {
	slot dialSlot
	onto *Path
}

// holdsSlot reports whether mv holds a dial slot.
func (mv *moveTicket) holdsSlot() bool { return mv != nil && mv.onto == nil }

// moveCheck is what a response needs to be moved, and when its move is
// next considered.
type moveCheck struct {
	t    *Transport
	key  string
	dest Destination
	in   Intents
	next time.Time
	race *raceEntry // an entrant of a race: its body stays while held
}

// held reports whether the body stays where it is: an entrant of a race
// not decided yet, or one that lost it.
func (mc *moveCheck) held() bool { return mc.race != nil && mc.race.held.Load() }

// multiplexed reports whether e's requests are streams of their own, one
// of which can end without the connection (HTTP/3).
func multiplexed(e *entry) bool { return e.c.carrier() == carrierQUIC }

// moveTo asks the policy whether the rest of a response, left bytes on e,
// should move, and if so takes e's place for the new connection: the
// ticket to send the moved request with (nil: it stays). If the policy
// splits the rest instead (a part of at most splitRoom bytes: see
// Splitter), split says where to and how much. rate is the rate the
// response has arrived at so far, in bits/s (see Candidate.Rate).
func (mc *moveCheck) moveTo(ctx context.Context, e *entry, left, rate, splitRoom int64) (*moveTicket, splitPlan) {
	mc.next = time.Now().Add(moveCheckInterval)
	if mc.held() {
		return nil, splitPlan{}
	}
	if multiplexed(e) && e.c.inFlight() > 1 {
		// A stream among others: its rate is a share of the connection's,
		// and a page's streams would all be weighed at once, each on
		// guesses about the others, no better on the whole (see
		// docs/findings.md). Alone on its connection it is weighed as an
		// HTTP/1 response is.
		return nil, splitPlan{}
	}
	left = min(left, maxSizeEstimate) // a server's number: it bounds nothing of ours
	in := mc.in
	in.SizeToBeReceived = left
	cands, queued := mc.t.core.candidatesOf(mc.key)
	for i := range cands {
		if cands[i].ID == e.id {
			cands[i].Rate = rate
		}
	}
	var splitFits func(*Path) bool
	if splitRoom > 0 && !multiplexed(e) {
		splitFits = func(p *Path) bool { return mc.t.core.connectionFor(mc.key, p) }
	}
	to, part, permitted := mc.t.Manager.moveTarget(ctx, &in, mc.dest, cands, queued, e.id, splitFits, splitRoom)
	switch {
	case to == nil:
		return nil, splitPlan{}
	case part > 0:
		mc.t.counters(e.path).split.Add(1)
		return nil, splitPlan{to: to, part: part}
	}
	if multiplexed(e) {
		// Its stream ends, the connection stays for the others: the
		// request goes to a connection on to, as the policy decides there.
		mc.t.counters(e.path).moved.Add(1)
		return &moveTicket{onto: to}, splitPlan{}
	}
	if mc.t.core.moveOnto(e, to) {
		// A free connection there (a page's tail): the request goes to it,
		// as the policy decides on that path.
		mc.t.counters(e.path).moved.Add(1)
		return &moveTicket{onto: to}, splitPlan{}
	}
	s, ok := mc.t.core.moveSlot(e, mc.dest, to, permitted, left)
	if !ok {
		return nil, splitPlan{}
	}
	mc.t.counters(e.path).moved.Add(1)
	return &moveTicket{slot: s}, splitPlan{}
}

// body is, where the rest of the response can be had with a range request
// (see rangeBody), a body over cb that moves mid-way when the policy says
// (resumingBody.maybeMove), and resumes on another path if its own goes
// down; nil where it cannot (cb is then the body).
func (mc *moveCheck) body(req *http.Request, resp *http.Response, cb *countingBody) *resumingBody {
	b := rangeBody(mc.t, req, resp, cb)
	if b == nil {
		return nil
	}
	mc.next = time.Now().Add(moveCheckInterval)
	b.move, b.cb = mc, cb
	b.watchStalls(mc, cb, resp.ContentLength)
	return b
}

// A body whose connection has gone quiet is judged on a timer too: the
// move check above runs as bytes arrive, and a connection that receives
// nothing (a cellular link stalled, its server backing off) gets none.
// Traced beside EVDO: two 100 kB objects waited 20 s on a path that had
// stalled, while the other path finished the rest of the page in 4 s; the
// move check, once a trickle came, put them at seven minutes there.
//
// stallRateSpan bounds the span a watched body's rate is measured over:
// a stalled link's smoothed round trip grows with its queue (seconds
// beside EVDO), and a rate taken over three of them would come too late
// to act on.
const stallRateSpan = time.Second

// resumable reports whether resp, a response to req on e, may resume on
// another path if e's path goes down (see rangeBody): a whole response of
// known length to a GET without a body or a Range header, on a path the
// Transport chose, not through a proxy.
func resumable(req *http.Request, resp *http.Response, e *entry, proxied bool) bool {
	return !proxied && e.path != nil && (req.Method == http.MethodGet || req.Method == "") &&
		(req.Body == nil || req.Body == http.NoBody) && req.Header.Get("Range") == "" &&
		resp.StatusCode == http.StatusOK && resp.ContentLength > 0 && resp.Body != nil && resp.Body != http.NoBody
}

// acceptsByteRanges reports whether h's Accept-Ranges lists "bytes".
func acceptsByteRanges(h http.Header) bool {
	for _, v := range h.Values("Accept-Ranges") {
		for unit := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(unit), "bytes") {
				return true
			}
		}
	}
	return false
}

// minRateSpan is how long a body's arrival is watched before its rate is
// told (Candidate.Rate): three of the path's round trips, and at least two
// of the pool's sampling ticks, so that slow start and a burst released by
// loss recovery weigh little.
func minRateSpan(p *Path) time.Duration {
	return max(3*p.Estimate().RTT, 2*sampleInterval)
}
