package intents

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
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

// maxResumes bounds how often a body asks for its rest: a server whose
// every connection fails is not asked for ever.
const maxResumes = 3

// errBody is a body that fails every Read with err.
type errBody struct{ err error }

func (e errBody) Read([]byte) (int, error) { return 0, e.err }
func (e errBody) Close() error             { return nil }

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
