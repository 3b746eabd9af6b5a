package intents

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sockintents/intents/internal/estimate"
)

// A handshake tells a path's RTT, not its rate: on networks nothing is
// known of, the path that answers first may be the one that carries a
// page's first object at a fraction of the other's rate, and the page's
// burst waits for that object. A first request is therefore sent on two
// paths at once while no permitted path has shown anything of its
// capacity (see Transport.DisableFirstRace), and the first to bring its
// body wins. At most one such race per Transport: what it shows (the
// winner's rate, the loser's lag) is what the decisions after it weigh,
// and a Knowledge file makes the next Manager start from it.

// raceBodyBytes is how much of a raced response's body is read before the
// race is decided: the first response whose body is complete, or has
// brought this much, wins. A page's root is mostly within it; a larger
// body has shown which path brings it faster by then. Bounds the memory a
// race holds: two such buffers.
const raceBodyBytes = 64 << 10

// firstRacePaths returns the two paths to race req on, if it is a first
// request to race (see above): a GET or HEAD without a body or an
// upgrade, not asking for MPTCP, not moving, to an origin not on
// loopback; while no path of the Manager has a capacity shown or
// remembered; if the policy is a Racer and says so, on the first two
// paths among its choices for it, neither avoided by the intents nor
// expensive. It claims the Transport's one race. Once a path
// has shown its capacity no request races, and asking costs an atomic
// load; with a policy that is not a Racer, a type assertion.
func (t *Transport) firstRacePaths(req *http.Request, in *Intents) (a, b *Path, ok bool) {
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
	if _, moving := req.Context().Value(moveSlotKey{}).(*moveTicket); moving {
		return nil, nil, false
	}
	for _, p := range m.Paths() {
		if p.Estimate().Bandwidth > 0 {
			t.raceOver.Store(true) // a capacity shown or remembered: the policy weighs it
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
	if len(two) < 2 || !t.raceOver.CompareAndSwap(false, true) {
		return nil, nil, false
	}
	return two[0], two[1], true
}

// raceKey carries into roundTripWith the path an entrant of a race is
// sent on (its request's placement only: the rest of a winner's body may
// move as any other's), and whether its body is held where it is: until
// the race is decided, and for ever for the loser, which is cancelled (a
// move would only send its request again).
type raceKey struct{}

type raceEntry struct {
	path *Path
	held atomic.Bool
}

// raceBodyWait bounds how long a race waits for a body once the first
// response's headers are in: a server may send a body of known length
// slowly, or stop midway, and a RoundTrip returns with the headers, not
// once the body is in. Then the entrant that has
// brought more of its body wins, and its caller reads on from there.
const raceBodyWait = time.Second

// entrant is one side of a race: its response and the start of its body,
// or its error.
type entrant struct {
	raceEntry
	cancel context.CancelFunc
	// Set before headers is closed: the response, or the error that
	// ended the request before one came.
	resp *http.Response
	err  error
	// Set before done is closed: the start of the body, and the error
	// that ended it early (the body is closed then).
	head    []byte
	headErr error
	headers chan struct{}
	done    chan struct{}
	read    atomic.Int64 // bytes of head so far, for a decision before done
	stop    atomic.Bool  // readHead returns after the Read under way
}

// failed reports whether e ended without a response to give: only once
// done is closed.
func (e *entrant) failed() bool { return e.err != nil || e.headErr != nil }

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
			e.resp, e.err = t.roundTripWith(r, in)
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

// startWait starts the wait for a body at the first headers of a race.
func startWait(wait <-chan time.Time) <-chan time.Time {
	if wait != nil {
		return wait
	}
	return time.After(raceBodyWait)
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

// lostRace gives the loser of a race the bound its loss shows (see
// estimate.Path.AddCeiling), if it lost on its rate: bytes (the body that
// won, or as much of it as decided the race) did not come over it within
// elapsed less its round trips (set-up, request, slow start's rounds),
// and the winner, its own round trips taken off, brought them at more
// than twice that rate. A loser whose round trips alone explain its loss
// showed nothing.
func lostRace(loser, winner *Path, bytes int64, elapsed time.Duration, tls bool) {
	rl, rw := loser.Estimate().RTT, winner.Estimate().RTT
	if bytes <= 0 || rl <= 0 || rw <= 0 {
		return
	}
	trips := 2 + math.Ceil(math.Log2(float64(bytes)/estimate.InitialWindow+1)) - 1 // handshake, request, slow start
	if tls {
		trips++
	}
	dl := elapsed - time.Duration(trips*float64(rl))
	dw := elapsed - time.Duration(trips*float64(rw))
	if dl <= 0 || (dw > 0 && dl <= 2*dw) {
		return
	}
	loser.sampleCeiling(bytes, dl)
}

// readHead reads the start of e's body: all of it, up to raceBodyBytes,
// unless its length is unknown (it may stream without end), or until the
// race stops it.
func (e *entrant) readHead() {
	body := e.resp.Body
	if body == nil || body == http.NoBody || e.resp.ContentLength <= 0 {
		return
	}
	// One byte beyond the length, to read its EOF; the length is the
	// server's (up to 2^63-1), bounded before it is added to.
	e.head = make([]byte, 0, min(e.resp.ContentLength, raceBodyBytes-1)+1)
	for len(e.head) < cap(e.head) && !e.stop.Load() {
		n, err := body.Read(e.head[len(e.head):cap(e.head)])
		e.head = e.head[:len(e.head)+n]
		e.read.Store(int64(len(e.head)))
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			body.Close()
			e.headErr = err
			return
		}
	}
}

// cause is why e failed.
func (e *entrant) cause() error {
	if e.err != nil {
		return e.err
	}
	return e.headErr
}

// discard ends an entrant that lost, once done: its request cancelled,
// its body closed.
func (e *entrant) discard() {
	e.cancel()
	if e.resp != nil && e.resp.Body != nil {
		e.resp.Body.Close()
	}
}

// racedBody is the winner's body: the start the race read, then the rest.
// A winner decided at raceBodyWait may still have a Read under way in
// readHead: the caller's first Read waits for it.
type racedBody struct {
	e     *entrant
	ready bool
	head  []byte
	rest  io.ReadCloser
}

func (b *racedBody) Read(p []byte) (int, error) {
	if !b.ready {
		<-b.e.done
		b.ready, b.head = true, b.e.head
	}
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	if b.e.headErr != nil {
		return 0, b.e.headErr
	}
	return b.rest.Read(p)
}

// Close closes the rest, which ends a Read readHead may have under way.
func (b *racedBody) Close() error {
	err := b.rest.Close()
	<-b.e.done
	b.e.cancel()
	return err
}

// untraced hides the caller's httptrace.ClientTrace from the second
// entrant's request.
type untraced struct{ context.Context }

func (c untraced) Value(key any) any {
	v := c.Context.Value(key)
	if _, ok := v.(*httptrace.ClientTrace); ok {
		return nil
	}
	return v
}
