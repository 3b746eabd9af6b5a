package intents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Every byte-range request this package makes (the two-step download's
// parts, a resumed rest, an aggregated download's ranges, a split part) is
// built by byteRange.request and its answer judged by byteRange.check
// (byteRange.fetch does both for a range of an object already known). A server's
// numbers (Content-Range, Content-Length) size nothing until check has
// found them to be what was asked for, and a part's body is read through
// partBody, which ends it at exactly the promised length.

// byteRange asks for bytes first to last (inclusive) of an object; last < 0
// asks for everything from first on.
type byteRange struct {
	first, last int64
	// total is the object's size when an earlier answer told it (-1 for
	// the first range): every later answer must agree.
	total int64
	// v is sent as If-Range, and every part must carry it: zero for the
	// first range, which learns it.
	v validator
}

// firstRange asks for the first n bytes of an object of unknown size.
func firstRange(n int64) byteRange { return byteRange{first: 0, last: n - 1, total: -1} }

// request is a copy of req, with ctx, asking for r.
func (r byteRange) request(ctx context.Context, req *http.Request) *http.Request {
	out := req.Clone(ctx)
	spec := "bytes=" + strconv.FormatInt(r.first, 10) + "-"
	if r.last >= 0 {
		spec += strconv.FormatInt(r.last, 10)
	}
	out.Header.Set("Range", spec)
	if r.v.value != "" {
		out.Header.Set("If-Range", r.v.value)
	}
	return out
}

// answer classifies the answer to a range request.
type answer int

const (
	// answerPart: a 206 of exactly the bytes asked for (or, for a range
	// past the object's end, up to its end), of the same version, with no
	// content coding: its part says which.
	answerPart answer = iota
	// answerWhole: a 200. The server ignored Range or, when If-Range was
	// sent, the object changed and this is the whole new version.
	answerWhole
	// answerUnsatisfiable: a 416 (an empty object, say).
	answerUnsatisfiable
	// answerOther: any other status (404, 500...): the server's answer.
	answerOther
	// answerChanged: a 206 of another version (a server that ignored
	// If-Range).
	answerChanged
	// answerBad: a 206 that does not fit what was asked: another range, a
	// larger one, a length that disagrees, a content coding. Never used.
	answerBad
)

// fetch asks t for r, as a copy of req with ctx, and returns the part's
// body (exactly its bytes, or an error) and the connection's body under it
// (nil if the Transport did not count it: see countedBy). An
// answer that is not the part asked for is closed and an error:
// ErrObjectChanged for another version (or a 200: If-Range's whole new
// one).
func (r byteRange) fetch(ctx context.Context, t *Transport, req *http.Request, mv *moveTicket) (io.ReadCloser, *countingBody, error) {
	resp, err := t.roundTrip(r.request(ctx, req), mv)
	if err != nil {
		return nil, nil, err
	}
	got, kind, err := r.check(resp)
	switch kind {
	case answerPart:
		return got.body(resp.Body), countedBy(resp.Body), nil
	case answerWhole, answerChanged:
		err = ErrObjectChanged
	case answerBad:
		err = fmt.Errorf("intents: asking for bytes from %d: %w", r.first, err)
	default:
		err = fmt.Errorf("intents: asking for bytes from %d: %s", r.first, resp.Status)
	}
	resp.Body.Close()
	return nil, nil, err
}

// part is the range a 206 answer holds: bytes first to last of total.
type part struct{ first, last, total int64 }

func (p part) size() int64 { return p.last - p.first + 1 }

// check judges resp, the answer to r. The error says why an answer is
// answerBad or answerChanged.
func (r byteRange) check(resp *http.Response) (part, answer, error) {
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		return part{}, answerWhole, nil
	case http.StatusRequestedRangeNotSatisfiable:
		return part{}, answerUnsatisfiable, nil
	default:
		return part{}, answerOther, nil
	}
	// Ranges of a coding do not stitch into its decoding; net/http decodes
	// gzip it asked for itself (Uncompressed) and would hide the coding.
	if ce := resp.Header.Get("Content-Encoding"); resp.Uncompressed || (ce != "" && ce != "identity") {
		return part{}, answerBad, fmt.Errorf("intents: range answered with content coding %q", ce)
	}
	cr := resp.Header.Get("Content-Range")
	first, last, total, err := parseContentRange(cr)
	if err != nil {
		return part{}, answerBad, err
	}
	want := r.last
	if want < 0 || want >= total {
		want = total - 1 // to the end, or a range reaching past it
	}
	switch {
	case r.total >= 0 && total != r.total:
		return part{}, answerBad, fmt.Errorf("intents: asked for a range of %d bytes, got Content-Range %q", r.total, cr)
	case first != r.first || last != want:
		return part{}, answerBad, fmt.Errorf("intents: asked for bytes %d-%d, got Content-Range %q", r.first, want, cr)
	case resp.ContentLength >= 0 && resp.ContentLength != last-first+1:
		return part{}, answerBad, fmt.Errorf("intents: Content-Length %d disagrees with Content-Range %q", resp.ContentLength, cr)
	case r.v.value != "" && resp.Header.Get(r.v.header) != r.v.value:
		return part{}, answerChanged, ErrObjectChanged
	}
	return part{first, last, total}, answerPart, nil
}

// parseContentRange reads "bytes FIRST-LAST/TOTAL" (RFC 9110 §14.4), with
// 0 <= FIRST <= LAST < TOTAL.
func parseContentRange(s string) (first, last, total int64, err error) {
	bad := fmt.Errorf("intents: bad Content-Range %q", s)
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, 0, bad
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, bad
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok || !digits(a) || !digits(b) || !digits(tot) {
		return 0, 0, 0, bad
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	total, err3 := strconv.ParseInt(tot, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || last < first || total <= last {
		return 0, 0, 0, bad
	}
	return first, last, total, nil
}

// digits reports whether s is one or more ASCII digits (ParseInt would
// also take a sign).
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validator is what If-Range sends and what every part must carry.
type validator struct {
	header string // "ETag" or "Last-Modified"
	value  string
}

// validatorOf is a response's strong validator, if it has one: If-Range
// takes a strong ETag or a Last-Modified date (RFC 9110 §13.1.5).
func validatorOf(h http.Header) validator {
	if e := h.Get("ETag"); len(e) > 2 && !strings.HasPrefix(e, "W/") {
		return validator{"ETag", e}
	}
	if lm := h.Get("Last-Modified"); lm != "" {
		return validator{"Last-Modified", lm}
	}
	return validator{}
}

// partBody reads exactly n bytes of rc: a body that ends sooner fails with
// io.ErrUnexpectedEOF, and bytes beyond n (a server sending more than its
// Content-Range said) are never handed out.
type partBody struct {
	rc   io.ReadCloser
	left int64
}

func (p part) body(rc io.ReadCloser) *partBody { return &partBody{rc: rc, left: p.size()} }

func (b *partBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case errors.Is(err, io.EOF):
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *partBody) Close() error { return b.rc.Close() }
