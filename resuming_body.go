package intents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// watchStalls has mc judge, every moveCheckInterval while the body's
// connection is quiet, whether its rest would arrive sooner elsewhere
// (see checkStall). cb, owing owed bytes, is the connection watched
// first.
func (b *resumingBody) watchStalls(mc *moveCheck, cb *countingBody, owed int64) {
	if multiplexed(cb.e) {
		return // an HTTP/3 stream: its connection watches its own progress
	}
	b.stall.judge = mc
	b.watchConn(cb, owed)
	b.mu.Lock()
	b.stall.timer = time.AfterFunc(moveCheckInterval, b.checkStall)
	b.mu.Unlock()
}

// watchConn makes cb, which owes owed bytes, the connection the stall
// watch looks at; none once the body cannot resume again, or if cb is not
// one of the pool's TCP connections on a path.
func (b *resumingBody) watchConn(cb *countingBody, owed int64) {
	if b.stall.judge == nil {
		return
	}
	if cb == nil || cb.e.path == nil || cb.e.mptcp || multiplexed(cb.e) || b.resumed >= maxResumes {
		b.stall.watched.Store(nil)
		return
	}
	b.stall.watched.Store(&watchedConn{cb: cb, owed: owed})
}

// checkStall runs on the stall watch's timer: if the watched connection
// has received nothing for as long as the dead-path watch waits before it
// may take a path for silent (deadAfter its path's minimum RTT: a stalled
// link's smoothed RTT grows with its queue, to seconds beside EVDO; read
// from the kernel, TCP_INFO, so a caller that reads slowly is not taken
// for a stalled connection: Linux only), and the body's
// judge says its rest would arrive sooner on another path (the rate it
// has come at so far falls while it waits), the connection closes as
// stalled and the rest is asked for elsewhere (see resumingBody.Read).
// It reads only what is safe beside a Read: atomics and what never
// changes.
func (b *resumingBody) checkStall() {
	if b.ctx.Err() != nil {
		return // ended or closed
	}
	if w := b.stall.watched.Load(); w != nil {
		b.judgeStall(w, time.Now())
	}
	b.mu.Lock()
	if !b.closed {
		b.stall.timer.Reset(moveCheckInterval)
	}
	b.mu.Unlock()
}

func (b *resumingBody) judgeStall(w *watchedConn, now time.Time) {
	e := w.cb.e
	left := w.owed - w.cb.n.Load()
	if left < moveMinBytes {
		return
	}
	info, ok := tcpInfoOf(e) // a system call: no lock is held here
	if !ok || quietFor(info, now.Sub(w.cb.start)) < deadAfter(e.path.Estimate().MinRTT) {
		return
	}
	mc := b.stall.judge
	if mc.held() {
		return
	}
	rate := w.cb.rate(now, min(minRateSpan(e.path), stallRateSpan))
	in := mc.in
	in.SizeToBeReceived = min(left, maxSizeEstimate)
	cands, queued := mc.t.core.candidatesOf(mc.key)
	for i := range cands {
		if cands[i].ID == e.id {
			cands[i].Rate = rate
		}
	}
	to, _, _ := mc.t.Manager.moveTarget(b.ctx, &in, mc.dest, cands, queued, e.id, nil, 0)
	if to == nil {
		return
	}
	b.stall.off.Store(true)
	if !mc.t.core.closeStalled(e) {
		b.stall.off.Store(false)
		return
	}
	b.stall.watched.CompareAndSwap(w, nil)
	mc.t.counters(e.path).moved.Add(1)
	if log := mc.t.Manager.debugLogger(b.ctx); log != nil {
		log.Debug("intents: quiet body leaves its path", "path", e.path.Name, "for", to.Name, "left", left, "rate", rate)
	}
}

// rangeBody is a body for resp (cb, whose length is known) that resumes on
// another path, from the byte it reached, when its path goes down, if the
// rest can be had with a range request: a strong validator (sent as
// If-Range, so the rest is of the same version or the body ends with
// ErrObjectChanged), byte ranges accepted, no content coding. Else nil.
func rangeBody(t *Transport, req *http.Request, resp *http.Response, cb *countingBody) *resumingBody {
	v := validatorOf(resp.Header)
	ce := resp.Header.Get("Content-Encoding")
	if v.value == "" || resp.Uncompressed || (ce != "" && ce != "identity") || !acceptsByteRanges(resp.Header) {
		return nil
	}
	n := resp.ContentLength
	b := newResumingBody(t, req, v, cb, cb.e.path, 0, n-1, n)
	b.onDown = true
	return b
}

// startSplit asks for the last plan.part bytes of b's range on plan.to,
// and ends b's own range before them; the parts asked for before, all in,
// follow it.
func (b *resumingBody) startSplit(plan splitPlan) {
	s := &splitPart{first: b.end - plan.part + 1, last: b.end, next: b.split, from: b.pos, buf: make([]byte, 0, plan.part)}
	s.cond.L = &s.mu
	ctx, stop := context.WithCancel(b.ctx)
	s.stop = stop
	in, _ := FromContext(ctx)
	in = in.requiring(plan.to)
	in.SizeToBeReceived = plan.part
	rest := byteRange{first: s.first, last: s.last, total: b.total, v: b.v}
	b.split, b.end = s, s.first-1
	b.splits++
	b.stall.watched.Store(nil) // its connection now owes the first part only
	b.cb.forgo(plan.part)      // its path's backlog: those bytes come another way
	go s.fetch(WithIntents(ctx, in), b.t, b.req, rest)
}

// takeSplit turns b from the first part, all read, to the split part if
// that would have the rest sooner (see splitPart.sooner): the first
// part's connection then closes and the part follows. If not (its answer
// has not begun, say), the part is abandoned and its bytes come where the
// first part's did, up to the next part if there is one (that one is in:
// it is taken there). False if b was closed meanwhile.
func (b *resumingBody) takeSplit() bool {
	s := b.split
	sooner, path, got := s.sooner()
	if log := b.t.Manager.debugLogger(b.ctx); log != nil {
		log.Debug("intents: split part", "taken", sooner, "first", s.first, "bytes", s.last-s.first+1, "in", got, "path", pathName(path))
	}
	if !sooner {
		next := s.next
		s.next = nil
		s.Close()
		if b.split, b.end = next, s.last; next != nil {
			b.end = next.first - 1
		}
		return true
	}
	b.split, b.end = nil, s.lastByte()
	// The rest is the parts': in memory, or on its way on an idle path;
	// the first part's server sends the part on its connection too.
	b.move = nil
	b.body().Close()
	b.path = path
	return b.setBody(s)
}

// resumingBody reads the range [pos, end] of an object. When the path it
// comes over goes down mid-way (onDown), it asks for the rest on another
// path, with If-Range so the rest is of the same version; when the server
// ends its connection mid-way (onDown too: see connectionCut), on a new
// connection; and when its policy moves it (move, see Mover), on a new
// connection on the path the policy names. Anything else ends it with the
// error.
type resumingBody struct {
	t               *Transport
	req             *http.Request
	v               validator
	path            *Path // what rc comes over
	rc              io.ReadCloser
	pos, end, total int64
	resumed         int
	onDown          bool
	// move, while set, is asked every moveCheckInterval whether the rest
	// should move from cb's connection (cb is rc until then); once moved,
	// never again.
	move *moveCheck
	cb   *countingBody
	// split, while set, is the last parts of the range, asked for on
	// other paths (see Splitter); end is then the first part's last
	// byte. splits counts the parts asked for (see splitRoom).
	split  *splitPart
	splits int
	stall  stallJudge // whether the rest leaves a connection gone quiet
	// ctx carries the requests for the rest; Close cancels it, so that a
	// Read waiting for one returns.
	ctx  context.Context
	stop context.CancelFunc
	// mu guards rc, closed and stall.timer: Close may come from another
	// goroutine while a Read waits or asks for the rest.
	mu     sync.Mutex
	closed bool
}

// newResumingBody reads rc, bytes pos to end of an object of total bytes
// with validator v, which comes over path.
func newResumingBody(t *Transport, req *http.Request, v validator, rc io.ReadCloser, path *Path, pos, end, total int64) *resumingBody {
	ctx, stop := context.WithCancel(req.Context())
	return &resumingBody{t: t, req: req, v: v, rc: rc, path: path, pos: pos, end: end, total: total, ctx: ctx, stop: stop}
}

func (b *resumingBody) body() io.ReadCloser {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rc
}

// setBody makes rc the body; if Close came first, it closes rc instead
// and reports false.
func (b *resumingBody) setBody(rc io.ReadCloser) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		rc.Close()
		return false
	}
	b.rc = rc
	b.mu.Unlock()
	return true
}

func (b *resumingBody) Read(p []byte) (int, error) {
	for {
		if b.split != nil {
			if b.pos > b.end && !b.takeSplit() {
				return 0, errBodyClosed
			} else if left := b.end - b.pos + 1; left > 0 && int64(len(p)) > left {
				p = p[:left] // the first part's connection carries the rest too
			}
		}
		n, err := b.body().Read(p)
		b.pos += int64(n)
		if b.split != nil && b.pos > b.end && errors.Is(err, io.EOF) {
			// The end of a resumed first part: the split part follows.
			if err = nil; n == 0 {
				continue
			}
		}
		if err == nil {
			if b.move != nil && n > 0 {
				b.maybeMove()
			}
			return n, nil
		}
		if errors.Is(err, io.EOF) && b.pos <= b.end {
			// Its connection's range ended before the body's: a resumed
			// first part ends where a split part began, and that part was
			// abandoned since (takeSplit). Never an early end: the rest is
			// asked for, or the body fails.
			err = errEndedShort
		}
		cut := b.onDown && connectionCut(err) && b.ctx.Err() == nil
		again := b.onDown && errors.Is(err, ErrPathDown) || cut || errors.Is(err, errSplitPart) || errors.Is(err, errStalled) || err == errEndedShort
		if errors.Is(err, io.EOF) || !again || b.pos > b.end {
			if errors.Is(err, io.EOF) {
				b.stop() // nothing more to ask for
			}
			return n, err
		}
		in, _ := FromContext(b.ctx)
		// The path is left out of the rest's choice when it failed the
		// body, not when the server ended the connection.
		if b.path != nil && err != errEndedShort && !(cut && !errors.Is(err, ErrPathDown)) && (!errors.Is(err, errStalled) || b.stall.off.Swap(false)) {
			in = in.without(b.path)
		}
		from := b.path
		if rerr := b.resume(WithIntents(b.ctx, in), nil); rerr != nil {
			return n, errors.Join(err, rerr)
		}
		if !errors.Is(err, errSplitPart) {
			b.t.counters(from).resumed.Add(1)
		}
		if n > 0 {
			return n, nil
		}
	}
}

// maybeMove moves the rest if it is due to be asked and the policy says
// so. A move that then fails leaves the error for the next Read.
func (b *resumingBody) maybeMove() {
	now := time.Now()
	left := b.end - b.pos + 1
	if left < moveMinBytes || b.resumed > 0 {
		return
	}
	if now.Before(b.move.next) && !b.partIn() {
		return
	}
	e := b.cb.e
	if !multiplexed(e) {
		// Bytes waiting in the socket have arrived: only the rest is to
		// come, and a split decided for bytes already in would be dropped
		// at the next Read. A move asks for those again, so the policy,
		// told less, errs toward staying.
		if left -= min(unreadOf(e), left); left < moveMinBytes {
			b.move.next = now.Add(moveCheckInterval)
			return
		}
	}
	mv, split := b.move.moveTo(b.ctx, e, left, b.cb.rate(now, minRateSpan(e.path)), b.splitRoom())
	if split.to != nil {
		b.startSplit(split) // the first part may still move, as a whole response would
		return
	}
	if mv == nil {
		return
	}
	b.move = nil
	if err := b.resume(b.ctx, mv); err != nil {
		b.setBody(errBody{fmt.Errorf("intents: moving the download to another path: %w", err)})
	}
}

// partIn reports, once, that the split part on its way is all in: the
// next may be asked for at once rather than at the next check, as the
// part's path is idle from then on.
func (b *resumingBody) partIn() bool {
	if b.split == nil || b.split.weighed || !b.split.in() {
		return false
	}
	b.split.weighed = true
	return true
}

// splitRoom is how large a part the first part's rest may be split with
// (see Splitter): 0 if none, as once it has moved or resumed, while a
// part is on its way, or once one was taken or dropped.
func (b *resumingBody) splitRoom() int64 {
	switch {
	case b.body() != io.ReadCloser(b.cb) || b.splits >= maxSplitParts:
		return 0
	case b.split == nil && b.splits == 0:
		return maxSplitPart
	case b.split != nil && b.split.in():
		return maxSplitPart - b.split.held()
	}
	return 0
}

// resume replaces the body by a request, with ctx, for the rest, which
// makes the move mv if set. While it
// may ask again, that request is marked as one its caller resumes: the
// rest's connection closes on a path taken for silent, or when it stalls,
// as the first did (see entry.recoverable), rather than being held as one
// whose body would be lost.
func (b *resumingBody) resume(ctx context.Context, mv *moveTicket) error {
	if b.resumed++; b.resumed > maxResumes || b.v.value == "" {
		return errors.New("intents: cannot resume the download")
	}
	if b.onDown && b.resumed < maxResumes {
		ctx = callerResumes(ctx)
	}
	b.body().Close()
	in, _ := FromContext(ctx)
	in.SizeToBeReceived = min(b.end-b.pos+1, maxSizeEstimate)
	rest := byteRange{first: b.pos, last: b.end, total: b.total, v: b.v}
	body, cb, err := rest.fetch(WithIntents(ctx, in), b.t, b.req, mv)
	if err != nil {
		return err
	}
	if !b.setBody(body) {
		return errBodyClosed
	}
	b.path = cb.path()
	b.watchConn(cb, rest.last-rest.first+1)
	return nil
}

func (b *resumingBody) Close() error {
	b.mu.Lock()
	b.closed = true
	rc := b.rc
	if b.stall.timer != nil {
		b.stall.timer.Stop()
	}
	b.mu.Unlock()
	b.stop()
	return rc.Close()
}

// watchedConn is the connection a resumingBody's Read waits on, and the
// bytes it owes in all.
type watchedConn struct {
	cb   *countingBody
	owed int64
}

// stallJudge is a resumingBody's watch on the connection its Read waits
// on (see resumingBody.checkStall).
type stallJudge struct {
	// judge, once set, is asked whether the rest should leave a
	// connection that has gone quiet; watched is the connection the
	// body's Read waits on then, and off says the rest leaves the path
	// that connection is on.
	judge   *moveCheck
	watched atomic.Pointer[watchedConn]
	off     atomic.Bool
	timer   *time.Timer // under the body's mu: looks again
}
