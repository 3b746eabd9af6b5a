package proxy

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sockintents/intents"
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

// maxClientPools bounds the client addresses whose pools are kept; the
// least recently used beyond it is dropped (its idle connections closed,
// its requests in flight ending as they would).
const maxClientPools = 64

// clientKey carries a forwarded request's client address to clientPools.
type clientKey struct{}

// clientPools forwards each client address's requests through a pool of
// its own, a clone of the Server's Transport on the same Manager (so the
// paths' estimates are shared): requests that hang, or uploads that
// crawl, hold only their own client's connections.
type clientPools struct {
	template *intents.Transport

	mu      sync.Mutex
	pools   map[netip.Addr]*clientPool
	dropped map[string]pathCount // what dropped pools carried, for Metrics
}

type clientPool struct {
	tr   *intents.Transport
	used time.Time
}

// pathCount is what Metrics tells of a path's forwarded requests.
type pathCount struct{ requests, bytes int64 }

func newClientPools(template *intents.Transport) *clientPools {
	return &clientPools{template: template, pools: map[netip.Addr]*clientPool{}, dropped: map[string]pathCount{}}
}

// RoundTrip sends req through its client's pool.
func (p *clientPools) RoundTrip(req *http.Request) (*http.Response, error) {
	client, _ := req.Context().Value(clientKey{}).(netip.Addr)
	return p.pool(client).RoundTrip(req)
}

func (p *clientPools) pool(client netip.Addr) *intents.Transport {
	var drop *intents.Transport
	p.mu.Lock()
	cp, ok := p.pools[client]
	if !ok {
		if len(p.pools) >= maxClientPools {
			var oldest netip.Addr
			for a, c := range p.pools {
				if drop == nil || c.used.Before(p.pools[oldest].used) {
					oldest, drop = a, c.tr
				}
			}
			delete(p.pools, oldest)
			for name, st := range drop.Stats() {
				c := p.dropped[name]
				p.dropped[name] = pathCount{c.requests + st.Requests, c.bytes + st.BytesReceived}
			}
		}
		cp = &clientPool{tr: p.template.Clone()}
		p.pools[client] = cp
	}
	cp.used = time.Now()
	p.mu.Unlock()
	if drop != nil {
		// Not Close: a request given this pool a moment ago may still be
		// on its way to it. Dropped, it ends when garbage collected.
		drop.CloseIdleConnections()
	}
	return cp.tr
}

// stats sums the requests and bytes of every pool, kept and dropped, by
// path ("" where the system routes).
func (p *clientPools) stats() map[string]pathCount {
	p.mu.Lock()
	out := maps.Clone(p.dropped)
	trs := make([]*intents.Transport, 0, len(p.pools))
	for _, c := range p.pools {
		trs = append(trs, c.tr)
	}
	p.mu.Unlock()
	for _, tr := range trs {
		for name, st := range tr.Stats() {
			c := out[name]
			out[name] = pathCount{c.requests + st.Requests, c.bytes + st.BytesReceived}
		}
	}
	return out
}

// close closes every pool's connections, the others' once their requests
// are done.
func (p *clientPools) close() {
	p.mu.Lock()
	pools := p.pools
	p.pools = map[netip.Addr]*clientPool{}
	p.mu.Unlock()
	for _, c := range pools {
		c.tr.Close()
	}
}

// DefaultRequestBodyTimeout bounds the wait for the next part of a
// forwarded request's body, as nginx's client_body_timeout does.
const DefaultRequestBodyTimeout = time.Minute

// ErrRequestBodyTimeout is the cause of a forwarded request whose client
// sent nothing of its body for RequestBodyTimeout: 408.
var ErrRequestBodyTimeout = errors.New("the client sent nothing of its request body within the timeout")

// timedBody is a request body each read of which must bring something
// within timeout: its client's connection (or HTTP/2 stream) gets a read
// deadline before each read.
type timedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	expired atomic.Bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	if err := b.rc.SetReadDeadline(time.Now().Add(b.timeout)); err != nil {
		return b.ReadCloser.Read(p) // not supported: the server's own limits hold
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		// The body is done: the connection's reads are the server's
		// again (its background read would else end the request).
		b.rc.SetReadDeadline(time.Time{})
	}
	if isTimeout(err) {
		b.expired.Store(true)
		err = ErrRequestBodyTimeout
	}
	return n, err
}

// timedBodyKey carries a request's timedBody to forwardError.
type timedBodyKey struct{}

// withRequestBodyTimeout puts r's body, if it has one, under the request
// body timeout.
func (s *Server) withRequestBodyTimeout(w http.ResponseWriter, r *http.Request) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	b := &timedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: orDefault(s.RequestBodyTimeout, DefaultRequestBodyTimeout)}
	r = r.WithContext(context.WithValue(r.Context(), timedBodyKey{}, b))
	r.Body = b
	return r
}

// bodyTimedOut reports whether r's client let its body's timeout pass.
func bodyTimedOut(r *http.Request) bool {
	b, ok := r.Context().Value(timedBodyKey{}).(*timedBody)
	return ok && b.expired.Load()
}
