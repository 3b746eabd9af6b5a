package intents

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Moving a response to another path (see Mover). A size predicted before
// any of a page was known places a large object as a small one, and the
// path's capacity is often learned only once the page's bulk is under way:
// the Transport asks its policy again when a response's headers show it far
// larger than predicted, and then every moveCheckInterval while its body
// arrives, and moves what the policy says would arrive sooner elsewhere.
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

// moveSlotKey carries into roundTripWith the dial slot a moving request
// takes (moveSlot): its first attempt opens that connection.
type moveSlotKey struct{}

// moveTicket holds a moving request's slot until it is taken, once: a
// context outlives its request (a response's Request keeps it).
type moveTicket struct {
	slot  dialSlot
	taken atomic.Bool
}

// movingTo takes the dial slot of a request that moves, if ctx carries one
// not taken yet.
func movingTo(ctx context.Context) (dialSlot, bool) {
	mt, ok := ctx.Value(moveSlotKey{}).(*moveTicket)
	if !ok || mt.taken.Swap(true) {
		return dialSlot{}, false
	}
	return mt.slot, true
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
// to stay. It returns the paths the request may use too.
func (m *Manager) moveTarget(ctx context.Context, in *Intents, dest Destination, cands []Candidate, queued int64, from uint64) (*Path, []*Path) {
	mv := m.mover()
	if mv == nil {
		return nil, nil
	}
	permitted, excl := permit(in, m.Paths(), networkFamily(dest.Network), false)
	shown := slices.DeleteFunc(cands, func(c Candidate) bool { return c.Path == nil || !slices.Contains(permitted, c.Path) })
	i := slices.IndexFunc(shown, func(c Candidate) bool { return c.ID == from })
	if i < 0 || len(permitted) < 2 {
		return nil, nil // its path is no longer permitted (gone down, say), or there is nowhere else
	}
	trace := decisionTrace(ctx, m)
	req := Request{Intents: *in, Dest: dest, Paths: permitted, Candidates: shown, Queued: queued, Explain: trace != nil}
	to, reason := mv.Move(&req, &shown[i])
	if to == shown[i].Path || !slices.Contains(permitted, to) {
		to = nil
	}
	if trace != nil {
		var choices []Choice
		if to != nil {
			choices = []Choice{{Path: to, Fresh: true}}
		}
		moving := shown[i]
		trace(DecisionInfo{Intents: *in, SizeSource: SizeFromResponse, Dest: dest, Permitted: permitted, Excluded: excl,
			Candidates: slices.Clone(shown), Choices: choices, Reason: reason, Moving: &moving})
	}
	return to, permitted
}

// candidatesOf is the pool's connections to key as a policy sees them,
// and what the requests waiting for key expect to receive (Request.Queued;
// a byte at least for each).
func (c *core) candidatesOf(key string) ([]Candidate, int64) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.entries[key]
	cands := make([]Candidate, 0, len(es))
	for _, e := range es {
		if e.migrating {
			continue
		}
		cand := e.candidate(now)
		cand.Waiting, cand.WaitingBytes = c.queue.waitingFor(e, nil)
		cands = append(cands, cand)
	}
	var typical int64
	if c.originSize != nil {
		typical, _ = c.originSize(key) // a moving request's key is its origin's: never through a proxy
	}
	return cands, c.queue.bytesFor(key, nil, typical, 1)
}

// moveSlot takes e out of the pool, closing it, and gives the place it
// held in the limits to a new connection on p for the request that moves
// from it: the queue cannot take that place in between. False if e is
// gone already or the pool is closed.
func (c *core) moveSlot(e *entry, dest Destination, p *Path, permitted []*Path, size int64) (dialSlot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || e.removed {
		return dialSlot{}, false
	}
	c.remove(e)
	return c.takeDialSlot(e.key, dest, permitted, Choice{Path: p, Fresh: true}, size), true
}

// moveCheck is what a response needs to be moved, and when its move is
// next considered.
type moveCheck struct {
	t    *Transport
	key  string
	dest Destination
	in   Intents
	next time.Time
}

// movable reports whether a response may move (see Mover): a GET without
// a body or a Range header, answered 200 with a length on an HTTP/1
// connection bound to a path, not through a proxy, not moved before, and
// the Manager's policy a Mover.
func (t *Transport) movable(req *http.Request, resp *http.Response, e *entry, proxied bool) bool {
	return t.Manager.mover() != nil && !proxied && e.path != nil && !e.mptcp &&
		(req.Method == http.MethodGet || req.Method == "") && (req.Body == nil || req.Body == http.NoBody) &&
		req.Header.Get("Range") == "" && resp.StatusCode == http.StatusOK && resp.ProtoMajor == 1 &&
		resp.ContentLength > 0 && resp.Body != nil && resp.Body != http.NoBody
}

// moveTo asks the policy whether the rest of a response, left bytes on e,
// should move, and if so takes e's place for the new connection: the
// context to send the moved request with.
// rate is the rate the response has arrived at so far, in bits/s (see
// Candidate.Rate).
func (mc *moveCheck) moveTo(ctx context.Context, e *entry, left, rate int64) (context.Context, bool) {
	mc.next = time.Now().Add(moveCheckInterval)
	left = min(left, maxSizeEstimate) // a server's number: it bounds nothing of ours
	in := mc.in
	in.SizeToBeReceived = left
	cands, queued := mc.t.core.candidatesOf(mc.key)
	for i := range cands {
		if cands[i].ID == e.id {
			cands[i].Rate = rate
		}
	}
	to, permitted := mc.t.Manager.moveTarget(ctx, &in, mc.dest, cands, queued, e.id)
	if to == nil {
		return nil, false
	}
	s, ok := mc.t.core.moveSlot(e, mc.dest, to, permitted, left)
	if !ok {
		return nil, false
	}
	mc.t.counters(e.path).moved.Add(1)
	return context.WithValue(ctx, moveSlotKey{}, &moveTicket{slot: s}), true
}

// body is cb or, where the rest of the response can be had with a range
// request (a strong validator, byte ranges accepted, no content coding),
// a body that moves mid-way when the policy says (resumingBody.maybeMove).
func (mc *moveCheck) body(req *http.Request, resp *http.Response, cb *countingBody) io.ReadCloser {
	v := validatorOf(resp.Header)
	ce := resp.Header.Get("Content-Encoding")
	if v.value == "" || resp.Uncompressed || (ce != "" && ce != "identity") || !acceptsByteRanges(resp.Header) {
		return cb
	}
	mc.next = time.Now().Add(moveCheckInterval)
	n := resp.ContentLength
	b := newResumingBody(mc.t, req, v, cb, cb.e.path, 0, n-1, n)
	b.move, b.cb = mc, cb
	return b
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
