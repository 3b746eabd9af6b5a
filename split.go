package intents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Splitting a response between two paths (see Splitter): the last part of
// its bytes is asked for on another path with a range request, and read
// into memory there while the first part keeps arriving where it was. Once
// the caller has read the first part, its connection closes (the server is
// sending the rest on it too) and the part follows; if the part's answer
// has not begun by then, it is abandoned and the response goes on whole
// where it was, so a split never waits for a path that did not answer.
//
// Once a part is all in, the policy may split the first part's rest again:
// parts come in turn, each just before the last, each sized on what the
// paths showed meanwhile (a policy can ask small while a path's rate is a
// guess). They stay in memory, in all at most maxSplitPart, until the first
// part reaches them.

const (
	// minSplitPart: a smaller part arrives within a round trip or two
	// wherever it is, and is not worth a request.
	minSplitPart = 16 << 10
	// maxSplitPart bounds the memory a response's split holds, all its
	// parts together: they wait there until the caller has read up to them.
	maxSplitPart = 4 << 20
	// maxSplitParts bounds the requests one response's split makes.
	maxSplitParts = 4
)

// splitPlan is a policy's split of a response: its last part bytes on to.
type splitPlan struct {
	to   *Path
	part int64
}

// splitPartOf bounds a policy's part of a response with left bytes to
// come to what is worth a request and room, what memory allows, leaving
// the first part at least a byte: 0 if nothing is.
func splitPartOf(part, left, room int64) int64 {
	part = min(part, room, left-1)
	if part < minSplitPart {
		return 0
	}
	return part
}

// splitPart is the last bytes, first to last, of an object, fetched into
// memory by its own goroutine (fetch) and read from there; then next's, the
// parts asked for before it, all in.
type splitPart struct {
	first, last int64
	next        *splitPart
	from        int64              // the byte the first part had reached when the part was asked for
	weighed     bool               // a next part has been weighed since it was all in (see partIn)
	stop        context.CancelFunc // ends the fetch
	mu          sync.Mutex
	cond        sync.Cond // signalled as bytes, the end or Close come
	buf         []byte    // what arrived; cap is the part's size
	read        int       // of buf, handed out
	begun       bool      // its answer was a part of the same version
	path        *Path     // what it came over, once begun
	err         error     // how the fetch ended (io.EOF: whole); nil while it runs
	closed      bool
}

// fetch asks for the part, r of req's object, and reads it into s.buf.
func (s *splitPart) fetch(ctx context.Context, t *Transport, req *http.Request, r byteRange) {
	body, cb, err := r.fetch(ctx, t, req, nil) // exactly the part's bytes, or an error
	if err != nil {
		s.end(err)
		return
	}
	defer body.Close()
	s.mu.Lock()
	s.begun, s.path = true, cb.path()
	s.mu.Unlock()
	if t.testHookSplitRead != nil {
		t.testHookSplitRead(0)
	}
	chunk := make([]byte, min(32<<10, cap(s.buf)))
	for {
		n, err := body.Read(chunk)
		s.mu.Lock()
		s.buf = append(s.buf, chunk[:n]...)
		in := len(s.buf)
		if err != nil {
			s.err = err
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if t.testHookSplitRead != nil && n > 0 {
			t.testHookSplitRead(int64(in))
		}
		if err != nil {
			return
		}
	}
}

// end records how the fetch ended, unless it ended already.
func (s *splitPart) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

// sooner reports whether the rest of the part, once the first part is
// in, would arrive sooner from the part's fetch than from the first
// part's connection, and over which path it comes: both have been
// arriving since the part was asked for, so each one's bytes since then
// are its rate (the part's set-up counted against it). A part whose
// answer has not begun, or has failed, is not. got is what of the part
// is in.
func (s *splitPart) sooner() (sooner bool, path *Path, got int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got = int64(len(s.buf))
	if !s.begun || (s.err != nil && s.err != io.EOF) {
		return false, s.path, got
	}
	part, first := s.last-s.first+1, s.first-s.from
	// (part - got) / got < part / first, without dividing by zero.
	return (part-got)*first < part*got, s.path, got
}

// in reports whether the part's fetch has ended with all its bytes.
func (s *splitPart) in() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == io.EOF
}

// held is the memory the part and those after it hold.
func (s *splitPart) held() int64 {
	var n int64
	for ; s != nil; s = s.next {
		n += int64(cap(s.buf))
	}
	return n
}

// lastByte is the last byte of the parts s begins.
func (s *splitPart) lastByte() int64 {
	for s.next != nil {
		s = s.next
	}
	return s.last
}

// Read hands out the part's bytes as they arrive, then the next's. A fetch
// that fails once begun fails with errSplitPart: the rest can be asked for
// again.
func (s *splitPart) Read(p []byte) (int, error) {
	n, err := s.readOwn(p)
	if err == io.EOF && s.next != nil {
		return s.next.Read(p)
	}
	return n, err
}

func (s *splitPart) readOwn(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.read == len(s.buf) && s.err == nil && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return 0, errBodyClosed
	}
	if s.read < len(s.buf) {
		n := copy(p, s.buf[s.read:])
		s.read += n
		return n, nil
	}
	if s.err == io.EOF {
		return 0, io.EOF
	}
	return 0, fmt.Errorf("%w: %w", errSplitPart, s.err)
}

// Close ends the fetch and any Read waiting for it, and the next parts.
func (s *splitPart) Close() error {
	for ; s != nil; s = s.next {
		s.stop()
		s.mu.Lock()
		s.closed = true
		s.cond.Broadcast()
		s.mu.Unlock()
	}
	return nil
}

// errSplitPart marks the failure of a split part's fetch once begun: the
// bytes from there on can be asked for again.
var errSplitPart = errors.New("intents: the split part's download failed")
