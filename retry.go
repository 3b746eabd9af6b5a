package intents

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// net/http keeps the errors that tell whether a request reached the server
// unexported (its bundled HTTP/2 transport's errClientConnGotGoAway and
// errClientConnUnusable, a REFUSED_STREAM StreamError; HTTP/1's
// nothingWrittenError and transportReadFromServerError), and its own
// Transport decides retries from them (http2shouldRetryRequest,
// persistConn.shouldRetryRequest). A ClientConn hands them out as they
// are, so this file recognises them by their text and type name. The
// differential tests against net/http and nginx pin the behaviour: if a
// Go release renames one, they fail.

// unprocessed reports whether err says the server never processed the
// request: a graceful GOAWAY whose last stream ID is below it, a stream it
// refused, a connection that could take no request, or one that died
// before any byte of the request was written. Such a request is safe to
// send again, whatever its method.
func unprocessed(err error) bool {
	if errors.Is(err, ErrUnprocessed) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch msg := e.Error(); {
		case msg == "http2: Transport received Server's graceful shutdown GOAWAY",
			msg == "http2: client conn not usable",
			// A new connection closed before its first request went out
			// (net/http's errClientConnNotEstablished).
			msg == "http2: client conn could not be established",
			strings.HasPrefix(msg, "stream error: ") && strings.HasSuffix(msg, "; REFUSED_STREAM"):
			return true
		}
		if fmt.Sprintf("%T", e) == "http.nothingWrittenError" {
			return true
		}
	}
	return false
}

// unwrapTransportErr removes net/http's internal wrapper of errors read
// from the server, as its Transport.RoundTrip does, so callers see the
// same errors as from http.Transport.
func unwrapTransportErr(err error) error {
	if fmt.Sprintf("%T", err) == "http.transportReadFromServerError" {
		if inner := errors.Unwrap(err); inner != nil {
			return inner
		}
	}
	return err
}

// idempotent reports whether req may be sent again after it may have been
// processed: an idempotent method, or an Idempotency-Key header (as
// net/http's Request.isReplayable).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// rewound returns req ready to be sent again, with its body from the
// start: the same request without a body, a clone with GetBody's body, or
// false when the body cannot be had again.
func rewound(req *http.Request) (*http.Request, bool) {
	if !hasBody(req) {
		return req, true
	}
	if !rewindable(req) {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	again := req.Clone(req.Context())
	again.Body = body
	return again, true
}

// rewindable reports whether rewound can give req again, without taking
// its body.
func rewindable(req *http.Request) bool { return !hasBody(req) || req.GetBody != nil }

func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

// maxUnprocessedRetries bounds how often a request the server never
// processed is sent again.
const maxUnprocessedRetries = 6

// backoff waits before sending a request again: not before the first
// retry, then 10 ms doubling, at most a second, or until ctx ends.
func backoff(ctx context.Context, attempt int) error {
	if attempt == 0 {
		return nil
	}
	t := time.NewTimer(min(10*time.Millisecond<<(attempt-1), time.Second))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
