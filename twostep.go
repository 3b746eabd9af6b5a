package intents

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// twoStepApplies reports whether req may be split: a plain GET without a
// body, a Range header or a size hint.
func (t *Transport) twoStepApplies(req *http.Request) bool {
	if req.Method != http.MethodGet && req.Method != "" {
		return false
	}
	if req.URL == nil || (req.Body != nil && req.Body != http.NoBody) || req.Header.Get("Range") != "" {
		return false
	}
	if in, _ := FromContext(req.Context()); in.SizeToBeReceived != 0 {
		return false
	}
	return t.knownSize(req.URL) == 0
}

// twoStep fetches the first TwoStep bytes as a small query, learns the size
// from Content-Range, and fetches the rest with that size as the intent,
// returning one response stitched from both. It never stitches two versions
// of an object: the second request carries If-Range with the first one's
// validator and its answer must carry it too; without a validator, or when
// anything is unexpected, it falls back to a plain GET. The body is exactly
// the object's length or ends in an error.
func (t *Transport) twoStep(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	n := int64(t.TwoStep)
	ask := firstRange(n)
	resp1, err := t.roundTrip(ask.request(WithIntents(ctx, Intents{Category: CategoryQuery, SizeToBeReceived: n}), req))
	if err != nil {
		return nil, err
	}
	got, kind, _ := ask.check(resp1)
	switch kind {
	case answerWhole, answerOther:
		// The server ignored Range (200, the whole object) or answered
		// otherwise: that is the answer.
		resp1.Request = req
		return resp1, nil
	case answerPart:
	default: // unsatisfiable (an empty object, say), or not what was asked
		return t.plainAfter(req, resp1)
	}
	t.rememberSize(req.URL, got.total)
	// Read the first part now (it is small: at most the n bytes asked for):
	// its connection is then free for the second request, instead of held
	// by a body nobody reads until that request is answered, which could
	// wait for that very connection.
	head, err := io.ReadAll(got.body(resp1.Body))
	resp1.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("intents: two-step download: the first part: %w", err)
	}
	resp1.Body = io.NopCloser(bytes.NewReader(head))
	whole := func(body io.ReadCloser) *http.Response { return wholeOf(resp1, req, got.total, body) }
	if got.last+1 == got.total { // it all came in the first part
		return whole(resp1.Body), nil
	}
	v := validatorOf(resp1.Header)
	if v.value == "" {
		return t.plainAfter(req, resp1)
	}

	rest := byteRange{first: got.last + 1, last: -1, total: got.total, v: v}
	in, _ := FromContext(ctx)
	in.SizeToBeReceived = got.total - rest.first
	resp2, err := t.roundTrip(rest.request(callerResumes(WithIntents(ctx, in)), req))
	if err != nil {
		return nil, err
	}
	got2, kind, _ := rest.check(resp2)
	switch kind {
	case answerWhole:
		// If-Range: the object changed, and this is the whole new version.
		resp2.Request = req
		return resp2, nil
	case answerPart:
	default:
		// Another version (a server ignoring If-Range), or not what was
		// asked: a plain GET, never a stitch.
		return t.plainAfter(req, resp2)
	}
	rest2 := newResumingBody(t, req, v, got2.body(resp2.Body), countedBy(resp2.Body).path(), got2.first, got2.last, got2.total)
	rest2.onDown = true
	return whole(&stitched{parts: []io.ReadCloser{resp1.Body, rest2}}), nil
}

// path is the path the body comes over (nil: the OS's routing, or no
// body of the pool's).
func (b *countingBody) path() *Path {
	if b == nil {
		return nil
	}
	return b.e.path
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
		if rerr := b.resume(WithIntents(b.ctx, in)); rerr != nil {
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
		// come (traced: splits decided for bytes already in, their parts
		// dropped at the next Read). A move asks for those again, so the
		// policy, told less, errs toward staying.
		if left -= min(unreadOf(e), left); left < moveMinBytes {
			b.move.next = now.Add(moveCheckInterval)
			return
		}
	}
	ctx, ok, split := b.move.moveTo(b.ctx, e, left, b.cb.rate(now, minRateSpan(e.path)), b.splitRoom())
	if split.to != nil {
		b.startSplit(split) // the first part may still move, as a whole response would
		return
	}
	if !ok {
		return
	}
	b.move = nil
	if err := b.resume(ctx); err != nil {
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

// maxResumes bounds how often a body asks for its rest: a server whose
// every connection fails is not asked for ever.
const maxResumes = 3

// resume replaces the body by a request, with ctx, for the rest. While it
// may ask again, that request is marked as one its caller resumes: the
// rest's connection closes on a path taken for silent, or when it stalls,
// as the first did (see entry.recoverable), rather than being held as one
// whose body would be lost.
func (b *resumingBody) resume(ctx context.Context) error {
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
	body, cb, err := rest.fetch(WithIntents(ctx, in), b.t, b.req)
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

// errBody is a body that fails every Read with err.
type errBody struct{ err error }

func (e errBody) Read([]byte) (int, error) { return 0, e.err }
func (e errBody) Close() error             { return nil }

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

// errEndedShort is a body's connection ending before the range asked of
// it: the rest is asked for again (see resumingBody.Read).
var errEndedShort = errors.New("intents: the body's connection ended before its range")

// errBodyClosed is what a Read gets after Close, as from net/http's bodies.
var errBodyClosed = errors.New("http: read on closed response body")

// wholeOf is the 200 response of the whole object (total bytes) that the
// 206 response part, the first range of req's object, begins: body gives
// its bytes.
func wholeOf(part *http.Response, req *http.Request, total int64, body io.ReadCloser) *http.Response {
	r := *part
	r.Status, r.StatusCode = "200 OK", http.StatusOK
	r.Header = part.Header.Clone()
	r.Header.Del("Content-Range")
	r.Header.Set("Content-Length", strconv.FormatInt(total, 10))
	r.ContentLength = total
	r.Body = body
	r.Request = req
	return &r
}

// plainAfter gives up on the split: it closes resp and sends req as is.
func (t *Transport) plainAfter(req *http.Request, resp *http.Response) (*http.Response, error) {
	resp.Body.Close()
	return t.roundTrip(req.Clone(req.Context()))
}

// stitched reads its parts one after the other and closes them all.
type stitched struct {
	parts []io.ReadCloser
	i     int
}

func (s *stitched) Read(p []byte) (int, error) {
	for s.i < len(s.parts) {
		n, err := s.parts[s.i].Read(p)
		if errors.Is(err, io.EOF) {
			s.i++
			if n > 0 || s.i < len(s.parts) {
				if n > 0 {
					return n, nil
				}
				continue
			}
		}
		return n, err
	}
	return 0, io.EOF
}

func (s *stitched) Close() error {
	var errs []error
	for _, p := range s.parts {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// connectionCut reports whether err says the server ended a body's
// connection before the body: closed (a restart, an idle timeout that
// raced the request) or reset it, or, over HTTP/2, sent GOAWAY and closed
// the connection with the stream unfinished (see cutShort). The rest of an
// object asked for by range on a new connection is then the same object's.
func connectionCut(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}
