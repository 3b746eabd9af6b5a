package intents

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
)

// The package's errors: sentinels for errors.Is, and the types that say
// what failed where.

// ErrObjectChanged is returned (from a response body's Read) when the
// object changed on the server during an aggregated download: the ranges
// already delivered and the rest would be of two versions, so the download
// stops rather than stitch them.
var ErrObjectChanged = errors.New("intents: the object changed on the server during the download")

// ErrNoPath is matched by errors.Is for every *NoPathError.
var ErrNoPath = errors.New("intents: no permitted path")

// NoPathError says that no permitted path could serve a destination, and
// which constraint excluded each path.
type NoPathError struct {
	Dest     string
	Excluded []Exclusion
}

// Exclusion says why a path was not permitted.
type Exclusion struct {
	Path   string
	Reason string
}

// Error lists each path and the constraint that excluded it.
func (e *NoPathError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "intents: no permitted path to %s", e.Dest)
	for i, x := range e.Excluded {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(x.Path + ": " + x.Reason)
	}
	if len(e.Excluded) == 0 {
		b.WriteString(": no paths known")
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNoPath) true.
func (e *NoPathError) Is(target error) bool { return target == ErrNoPath }

// errPoolClosed is what a Pool's Get and a Transport's requests fail
// with after Close: net.ErrClosed, as for any closed network resource.
var errPoolClosed = fmt.Errorf("intents: pool closed: %w", net.ErrClosed)

// errStalled is matched by the errors of bodies whose connection was
// closed because it stalled while its path answered: they resume on
// another connection (see pathHealth.resumeStalled).
var errStalled = errors.New("intents: connection stalled")

type stalledError struct{ err error }

func (e *stalledError) Error() string        { return errStalled.Error() + ": " + e.err.Error() }
func (e *stalledError) Unwrap() error        { return e.err }
func (e *stalledError) Is(target error) bool { return target == errStalled }

// ErrPathDown is matched (errors.Is) by the errors of requests whose path
// went down or lost its address while they were in flight.
var ErrPathDown = errors.New("intents: path went down")

// PathDownError says which path a request lost.
type PathDownError struct {
	Path string
	// Stayed: the request could not move to another path (a body without
	// a validator to resume by, a request not safe to send twice), so its
	// connection was left to it, and Err is how that ended (the server,
	// the kernel giving up, the caller's deadline).
	Stayed bool
	Err    error // what the connection reported
}

// Error names the path and what the connection reported.
func (e *PathDownError) Error() string {
	if e.Stayed {
		return "intents: path " + e.Path + " went down or silent during the request, which could not move to another path " +
			"(no validator to resume by, or not safe to send twice), and its connection ended: " + e.Err.Error()
	}
	return "intents: path " + e.Path + " went down during the request: " + e.Err.Error()
}

// Unwrap returns the connection's error.
func (e *PathDownError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPathDown) true.
func (e *PathDownError) Is(target error) bool { return target == ErrPathDown }

// PathError is one path's part of a failure over several paths: a dial or
// lookup that failed on every path the policy chose returns each path's
// error as a PathError, joined (errors.Join), so none is lost. errors.Is
// and errors.As see through it.
type PathError struct {
	Path string // the path's name; "" for the operating system's routing
	Err  error
}

// Error names the path and its error.
func (e *PathError) Error() string {
	if e.Path == "" {
		return "system routing: " + e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

// Unwrap returns the path's error.
func (e *PathError) Unwrap() error { return e.Err }

// pathErrors is the error of something that failed on every path it was
// tried on: one path's error as it is, several tagged and joined.
func pathErrors(errs []*PathError) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0].Err
	}
	joined := make([]error, len(errs))
	for i, e := range errs {
		joined[i] = e
	}
	return errors.Join(joined...)
}

// alsoError is err that errors.Is also matches with also: a sentinel
// net/http's own error lacks, which a caller can tell it by. Its text is
// err's, as net/http gives it.
type alsoError struct{ err, also error }

func (e *alsoError) Error() string   { return e.err.Error() }
func (e *alsoError) Unwrap() []error { return []error{e.err, e.also} }

// cutShort explains net/http's error for an HTTP/2 response body that a
// GOAWAY and then the connection's close cut short, which it reports with
// a type it does not export: it matches io.ErrUnexpectedEOF too, as an
// HTTP/1.1 body cut short does.
func cutShort(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if fmt.Sprintf("%T", e) == "http.http2GoAwayError" {
			return &alsoError{err, io.ErrUnexpectedEOF}
		}
	}
	return err
}

// markUnprocessed makes an error after which the server cannot have
// processed the request (see unprocessed) match ErrUnprocessed, where the
// Transport gave up sending it again: a caller may send it once more,
// whatever its method.
func markUnprocessed(err error) error {
	if unprocessed(err) && !errors.Is(err, ErrUnprocessed) {
		return &alsoError{err, ErrUnprocessed}
	}
	return err
}
