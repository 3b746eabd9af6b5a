package intents

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	return t.sizes.get(req.URL.String()) == 0
}

// twoStep fetches the first TwoStep bytes as a small query, learns the size
// from Content-Range, and fetches the rest with that size as the intent,
// returning one response stitched from both. It never stitches two versions
// of an object: the second request carries If-Range with the first one's
// validator, and without a validator, or when anything is unexpected, it
// falls back to a plain GET.
func (t *Transport) twoStep(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	n := int64(t.TwoStep)

	first := req.Clone(WithIntents(ctx, Intents{Category: CategoryQuery, SizeToBeReceived: n}))
	first.Header.Set("Range", "bytes=0-"+strconv.FormatInt(n-1, 10))
	resp1, err := t.roundTrip(first)
	if err != nil {
		return nil, err
	}
	switch {
	case resp1.StatusCode == http.StatusRequestedRangeNotSatisfiable: // an empty object, say
		return t.plainAfter(req, resp1)
	case resp1.StatusCode != http.StatusPartialContent:
		// The server ignored Range (200, the whole object) or answered
		// otherwise: that is the answer.
		resp1.Request = req
		return resp1, nil
	case resp1.Uncompressed || (resp1.Header.Get("Content-Encoding") != "" && resp1.Header.Get("Content-Encoding") != "identity"):
		return t.plainAfter(req, resp1) // ranges of an encoding do not stitch into its decoding
	}
	start, end, total, err := parseContentRange(resp1.Header.Get("Content-Range"))
	if err != nil || start != 0 || end >= total || resp1.ContentLength != end+1 {
		return t.plainAfter(req, resp1)
	}
	t.sizes.put(req.URL.String(), total)
	// Read the first part now (it is small): its connection is then free
	// for the second request, instead of held by a body nobody reads until
	// that request is answered, which could wait for that very connection.
	head, err := io.ReadAll(io.LimitReader(resp1.Body, end+2))
	resp1.Body.Close()
	if err != nil {
		return nil, err
	}
	if int64(len(head)) != end+1 {
		return nil, fmt.Errorf("intents: two-step download: %d bytes in the first part, want %d", len(head), end+1)
	}
	resp1.Body = io.NopCloser(bytes.NewReader(head))
	whole := func(body io.ReadCloser) *http.Response { return wholeOf(resp1, req, total, body) }
	if end+1 == total { // it all came in the first part
		return whole(resp1.Body), nil
	}
	validator := resp1.Header.Get("ETag")
	if validator == "" || strings.HasPrefix(validator, "W/") { // If-Range needs a strong validator
		validator = resp1.Header.Get("Last-Modified")
	}
	if validator == "" {
		return t.plainAfter(req, resp1)
	}

	rest := total - end - 1
	in, _ := FromContext(ctx)
	in.SizeToBeReceived = rest
	second := req.Clone(WithIntents(ctx, in))
	second.Header.Set("Range", "bytes="+strconv.FormatInt(end+1, 10)+"-")
	second.Header.Set("If-Range", validator)
	resp2, err := t.roundTrip(second)
	if err != nil {
		resp1.Body.Close()
		return nil, err
	}
	if resp2.StatusCode == http.StatusOK {
		// The object changed: If-Range gave the whole new version.
		resp1.Body.Close()
		resp2.Request = req
		return resp2, nil
	}
	s2, e2, t2, err := parseContentRange(resp2.Header.Get("Content-Range"))
	if resp2.StatusCode != http.StatusPartialContent || err != nil || s2 != end+1 || e2 != total-1 || t2 != total ||
		resp2.Uncompressed || resp2.Header.Get("Content-Encoding") != resp1.Header.Get("Content-Encoding") {
		resp2.Body.Close()
		return t.plainAfter(req, resp1)
	}
	rest2 := &resumingBody{t: t, req: req, v: validatorOf(resp1.Header), rc: resp2.Body, pos: end + 1, end: total - 1, total: total}
	return whole(&stitched{parts: []io.ReadCloser{resp1.Body, rest2}}), nil
}

// resumingBody reads the range [pos, end] of an object. When the path it
// comes over goes down mid-way, it asks for the rest on another path, with
// If-Range so the rest is of the same version; anything else ends it with
// the error.
type resumingBody struct {
	t               *Transport
	req             *http.Request
	v               validator
	rc              io.ReadCloser
	pos, end, total int64
	resumed         int
}

func (b *resumingBody) Read(p []byte) (int, error) {
	for {
		n, err := b.rc.Read(p)
		b.pos += int64(n)
		if err == nil || errors.Is(err, io.EOF) || !errors.Is(err, ErrPathDown) || b.pos > b.end {
			return n, err
		}
		if rerr := b.resume(); rerr != nil {
			return n, errors.Join(err, rerr)
		}
		if n > 0 {
			return n, nil
		}
	}
}

// resume replaces the body by a request for the rest, avoiding the path
// that went down.
func (b *resumingBody) resume() error {
	if b.resumed++; b.resumed > 3 || b.v.value == "" {
		return errors.New("intents: cannot resume the download")
	}
	in, _ := FromContext(b.req.Context())
	if cb, ok := b.rc.(*countingBody); ok && cb.e.path != nil {
		in = in.without(cb.e.path)
	}
	b.rc.Close()
	in.SizeToBeReceived = b.end - b.pos + 1
	r := b.req.Clone(WithIntents(b.req.Context(), in))
	r.Header.Set("Range", "bytes="+strconv.FormatInt(b.pos, 10)+"-"+strconv.FormatInt(b.end, 10))
	r.Header.Set("If-Range", b.v.value)
	resp, err := b.t.roundTrip(r)
	if err != nil {
		b.rc = io.NopCloser(strings.NewReader(""))
		return err
	}
	s, e, total, err := parseContentRange(resp.Header.Get("Content-Range"))
	if resp.StatusCode != http.StatusPartialContent || err != nil || s != b.pos || e != b.end || total != b.total ||
		resp.Header.Get(b.v.header) != b.v.value {
		resp.Body.Close()
		b.rc = io.NopCloser(strings.NewReader(""))
		if resp.StatusCode == http.StatusOK {
			return ErrObjectChanged
		}
		return fmt.Errorf("intents: resuming at byte %d: %s %s", b.pos, resp.Status, resp.Header.Get("Content-Range"))
	}
	b.rc = resp.Body
	return nil
}

func (b *resumingBody) Close() error { return b.rc.Close() }

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

// parseContentRange reads "bytes START-END/TOTAL".
func parseContentRange(s string) (start, end, total int64, err error) {
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
	if !ok {
		return 0, 0, 0, bad
	}
	if start, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	if end, err = strconv.ParseInt(b, 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	if total, err = strconv.ParseInt(tot, 10, 64); err != nil || start < 0 || end < start || total <= end {
		return 0, 0, 0, bad
	}
	return start, end, total, nil
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
