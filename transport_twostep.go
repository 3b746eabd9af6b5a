package intents

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
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
	resp1, err := t.roundTrip(ask.request(WithIntents(ctx, Intents{Category: CategoryQuery, SizeToBeReceived: n}), req), nil)
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
	resp2, err := t.roundTrip(rest.request(callerResumes(WithIntents(ctx, in)), req), nil)
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

// plainAfter gives up on the split: it closes resp and sends req as is.
func (t *Transport) plainAfter(req *http.Request, resp *http.Response) (*http.Response, error) {
	resp.Body.Close()
	return t.roundTrip(req.Clone(req.Context()), nil)
}
