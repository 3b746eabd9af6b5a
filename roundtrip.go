package intents

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"time"
)

// A request's way through the Transport, top down:
//
//	RoundTrip           another protocol's RoundTripper, aggregate, two-step, or:
//	  roundTripWith
//	    prepare         its origin, the size to expect, its proxy, how to dial
//	    send            per attempt: acquire a connection, send, send again?
//	      acquire       a pooled connection, or a new one the policy chose
//	      retry         whether and how a failed attempt goes again
//	    wrapBody        learn its size, count its body, move or resume it

// request is one request on its way through the Transport: what prepare
// found out, for the steps that follow.
type request struct {
	t   *Transport
	req *http.Request
	in  Intents // with the expected size, and the paths left out by retries
	o   origin
	key string // the pool's key: the origin, and the proxy if any
	// The object, for the size cache (zero when size hints are not kept);
	// where in.SizeToBeReceived came from; and, if the origin's median is
	// what to expect, the origin, looked up again as it is decided.
	object     objectKey
	sizeSource sizeSource
	sizeOrigin string
	proxy      *url.URL
	dest       Destination
	dial       func(ctx context.Context, ch Choice) (pooled, net.Conn, error) // an originDialer's
	// A request moving to a new connection (see Mover) has its place in
	// the limits already, moveSlot, until it is used; a request that moved
	// is not moved again.
	moving, moved bool
	moveSlot      dialSlot
	// An entrant of a first request's race (see raceFirst) is sent on
	// its path, and its body is held there while race.held says.
	race *raceEntry
}

// originDialer opens a request's connections to its origin. The pool keeps
// its dial with a connection, to open spares like it: what it needs is
// here, apart from the request.
type originDialer struct {
	t     *Transport
	o     origin
	proxy *url.URL
	// The request's intents as prepared: its MPTCP mode, and for an
	// HTTP/3 connection the paths it may migrate to (a path left out on a
	// retry went down, which permits it no more). Not the request's own:
	// spare dials read them from other goroutines.
	in Intents
}

// tcp opens an HTTP/1 or HTTP/2 connection as ch says.
func (d *originDialer) tcp(ctx context.Context, ch Choice) (pooled, net.Conn, error) {
	h := &dialHolder{choice: ch, intent: d.in.Multipath, proxy: d.proxy}
	cc, err := d.t.inner.NewClientConn(context.WithValue(ctx, dialHolderKey{}, h), d.o.scheme, d.o.hostPort)
	if err != nil {
		return nil, nil, err
	}
	return &clientConn{cc: cc, tls: h.tls}, h.raw, nil
}

// http3OrTCP races HTTP/3 against TCP where the origin speaks it (see
// Transport.HTTP3), else dials TCP.
func (d *originDialer) http3OrTCP(ctx context.Context, ch Choice) (pooled, net.Conn, error) {
	if port, ok := d.t.http3Port(d.o, d.proxy != nil, ch, time.Now()); ok {
		return d.t.raceHTTP3(ctx, ch, d.o, port, d.in, d.tcp)
	}
	return d.tcp(ctx, ch)
}

// send sends the request on a connection the pool grants, again on
// another where that is safe (see retry), and returns its response, the
// connection it came on and the bytes that connection counts as pending
// for it.
func (r *request) send() (*http.Response, *entry, int64, error) {
	ctx := r.req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	for attempt := 0; ; attempt++ {
		if trace != nil && trace.GetConn != nil {
			trace.GetConn(r.o.hostPort)
		}
		g, err := r.acquire(ctx)
		if err != nil {
			closeBody(r.req)
			return nil, nil, 0, err
		}
		e := g.e
		cc := e.c.(requestConn)
		if trace != nil && trace.GotConn != nil {
			conn := cc.traceConn()
			if conn == nil {
				conn = e.raw
			}
			trace.GotConn(httptrace.GotConnInfo{Conn: conn, Reused: g.reused, WasIdle: g.wasIdle, IdleTime: g.idle})
		}
		r.t.counters(e.path).requests.Add(1)
		// Not resumable until a body that resumes by range is on its way;
		// until its response comes, sent again elsewhere if its path goes
		// silent and it may be (see entry.recoverable).
		e.fate.resumable.Store(false)
		e.fate.replayable.Store(attempt == 0 && idempotent(r.req) && rewindable(r.req))
		resp, err := cc.roundTrip(r.req)
		e.fate.replayable.Store(false)
		if r.t.core.sched.waiting() && cc.available() > 0 {
			// Its slot now counts in the connection's own streams, and
			// the connection can take more: no state hook says so.
			r.t.core.changed(e)
		}
		if err == nil {
			return resp, e, g.size, nil // g.size is counted as pending on e by acquire
		}
		e.addPending(-g.size)
		if again, err := r.retry(ctx, e, g.reused, attempt, unwrapTransportErr(err)); !again {
			return nil, nil, 0, err
		}
	}
}

// acquire takes the connection the request is moving to, or has the pool
// grant one: a pooled connection, or a new one where the policy says.
func (r *request) acquire(ctx context.Context) (grant, error) {
	if r.moving {
		r.moving = false
		e, err := r.t.core.open(ctx, r.moveSlot, nil, r.dial)
		if err == nil {
			return grant{e: e, size: r.moveSlot.size}, nil
		}
		if ctx.Err() != nil || errors.Is(err, errPoolClosed) {
			return grant{}, err
		}
		// On a failed dial, as any request: where the policy says.
	}
	in := r.in
	if r.race != nil {
		in = in.requiring(r.race.path)
	}
	return r.t.core.acquire(ctx, connRequest{key: r.key, dest: r.dest, in: in, sizeSource: r.sizeSource,
		sizeOrigin: r.sizeOrigin, loopback: loopbackHint(r.o.loopback)}, r.dial)
}

// retry decides whether the attempt that failed with err on e goes again,
// and readies it if so: a body rewound, a path that went down left out, a
// backoff waited. If not, it returns the error the caller gets.
func (r *request) retry(ctx context.Context, e *entry, reused bool, attempt int, err error) (bool, error) {
	wentDown, stalled := e.ended() // on e's path, or one it migrated to
	down := wentDown != nil && wentDown.path != nil
	var again bool
	switch {
	case ctx.Err() != nil:
	case unprocessed(err):
		// The server never processed it (a graceful GOAWAY, a refused
		// stream, a connection that took nothing): safe to send again
		// whatever the method, as net/http does, on another connection;
		// a few times, since a server that ends connections after a few
		// requests may end the next too.
		again = attempt < maxUnprocessedRetries
	case attempt == 0 && (reused || down || stalled):
		// A reused connection the server had closed, a path that went
		// down before any of the response came, or a stalled connection
		// closed as its previous body ended: once more, on another path
		// in the second case, if that is safe.
		again = idempotent(r.req)
	}
	if again {
		if rewound, ok := rewound(r.req); ok {
			r.req = rewound
			if down {
				r.in = r.in.without(wentDown.path)
			}
			if err := backoff(ctx, attempt); err != nil {
				closeBody(r.req)
				return false, err
			}
			return true, nil
		}
	}
	return false, e.pathErr(markUnprocessed(err))
}

// wrapBody learns what resp tells (its size, the origin's HTTP/3) and
// gives it the body the caller reads: counted on its connection e, which
// counts expect bytes as pending for it, and where it can, one that moves
// to another path when the policy says or resumes there when its own
// fails.
func (r *request) wrapBody(resp *http.Response, e *entry, expect int64) (*http.Response, error) {
	t := r.t
	e.answered.Store(true)
	if r.object.origin != "" && resp.ContentLength >= 0 && resp.StatusCode == http.StatusOK {
		learnSize(t.sizes, t.core, r.object, resp.ContentLength)
	}
	if t.HTTP3 != nil && r.o.scheme == "https" && r.proxy == nil {
		if alt := resp.Header["Alt-Svc"]; len(alt) > 0 {
			t.altSvc.learn(r.key, r.o.host, alt, time.Now())
		}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil || resp.Body == http.NoBody {
		e.addPending(-expect)
		return resp, nil
	}
	predicted := expect
	if cl := min(resp.ContentLength, maxSizeEstimate); cl >= 0 && cl != expect {
		// The headers tell what the body owes: the path's backlog is now
		// known, for the decisions made while it arrives.
		e.addPending(cl - expect)
		expect = cl
	}
	ctx := r.req.Context()
	var mc *moveCheck
	if !r.moved && t.movable(r.req, resp, e, r.proxy != nil) {
		mc = &moveCheck{t: t, key: r.key, dest: r.dest, in: r.in, race: r.race}
		if cl := resp.ContentLength; cl >= 2*predicted && cl-predicted >= moveMinBytes {
			if mv, _ := mc.moveTo(ctx, e, expect, 0, 0); mv != nil {
				return r.sendWhole(mv, resp, e, expect)
			}
		}
	}
	cb := newCountingBody(resp.Body, t, e)
	if r.object.origin != "" && resp.ContentLength < 0 && resp.StatusCode == http.StatusOK {
		sizes, core, of := t.sizes, t.core, r.object // copies: the body keeps no request
		cb.sizeOf = func(n int64) { learnSize(sizes, core, of, n) }
	}
	cb.expect.Store(expect)
	resp.Body = cb
	var resumes *resumingBody
	switch {
	case mc != nil:
		resumes = mc.body(r.req, resp, cb)
	case resumable(r.req, resp, e, r.proxy != nil):
		// A response that moved is not moved again, but resumes if the
		// path it moved onto goes down or its connection stalls, as one
		// that did not move does.
		resumes = rangeBody(t, r.req, resp, cb)
	}
	if resumes != nil {
		resp.Body = resumes
	}
	// A body that resumes by range may move off a stalled connection
	// (pathHealth.resumeStalled): on HTTP/1 only, where the connection carries
	// nothing else until the body ends (an HTTP/2 one may be left with
	// another stream, which would fail, when this one's body has ended).
	e.fate.resumable.Store((resumes != nil || resumedByCaller(ctx)) && resp.ProtoMajor == 1)
	return resp, nil
}

// sendWhole sends the request again, making the move mv: it was placed
// as a far smaller object than resp's headers say, and the caller has
// none of resp's body yet.
func (r *request) sendWhole(mv *moveTicket, resp *http.Response, e *entry, size int64) (*http.Response, error) {
	e.addPending(-size)
	resp.Body.Close()
	in := r.in
	in.SizeToBeReceived = size
	return r.t.roundTripWith(r.req, in, mv)
}
