package intents

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"syscall"
)

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
