package proxy

import (
	"context"
	"errors"
	"net/http/httptrace"
	"sync"
	"time"
)

// DefaultResponseHeaderTimeout bounds the wait for an origin's response
// headers once a request is sent whole.
const DefaultResponseHeaderTimeout = 2 * time.Minute

// ErrResponseHeaderTimeout is the cause of a forwarded request that
// waited ResponseHeaderTimeout for its response's headers: 504.
var ErrResponseHeaderTimeout = errors.New("no response headers from the origin within the timeout")

// withResponseHeaderTimeout bounds ctx, a forwarded request's, by the
// response header timeout, counted from when the request was sent whole
// (its body too: a slow upload is its client's time, not the origin's)
// and ended by the response's first byte. stop releases it.
func (s *Server) withResponseHeaderTimeout(ctx context.Context) (_ context.Context, stop func()) {
	timeout := orDefault(s.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	ctx, cancel := context.WithCancelCause(ctx)
	var mu sync.Mutex
	var timer *time.Timer
	done := false
	disarm := func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
		if timer != nil {
			timer.Stop()
		}
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			mu.Lock()
			defer mu.Unlock()
			if done {
				return
			}
			if timer != nil {
				timer.Stop() // a retry on another connection starts again
			}
			timer = time.AfterFunc(timeout, func() { cancel(ErrResponseHeaderTimeout) })
		},
		GotFirstResponseByte: disarm,
	})
	return ctx, func() {
		disarm()
		cancel(nil)
	}
}
