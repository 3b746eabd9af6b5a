package intents

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Transport is an http.RoundTripper that chooses, for every request, the
// path and the connection that carry it: the paper's message-granularity
// API with implicit connection pooling. The intents come from the
// request's context (WithIntents); the Manager's policy sees the pooled
// connections to the request's host (HTTP/1.1 ones that are idle and
// HTTP/2 ones with free streams are both reuse candidates) and the
// permitted paths, and decides between reusing one and opening a new
// connection on some path.
//
// The protocol work stays in net/http: each connection is an
// *http.ClientConn (Go 1.26's Transport.NewClientConn) made by an inner
// http.Transport whose dialer binds the socket to the chosen path, so
// HTTP/1.1, HTTP/2, TLS and proxies behave as in net/http.
//
// The zero Transport behaves like http.DefaultTransport, except that it
// keeps at most 6 connections per host and 17 in total, as browsers do.
// A Transport must not be copied after first use.
type Transport struct {
	// Manager supplies paths and policy. nil: operating system routing,
	// and DefaultManager for requests whose intents constrain paths.
	Manager *Manager
	// Base is the template of the inner transport (TLS configuration,
	// proxy, protocols, timeouts); its dial functions are replaced. nil: a
	// clone of http.DefaultTransport.
	Base *http.Transport
	// Dialer dials the connections (Timeout, KeepAlive, Control...). nil:
	// 30 s timeout and keep-alive, as http.DefaultTransport.
	Dialer *Dialer
	// MaxConnsPerHost limits connections per scheme, host and port (default
	// 6); MaxConns limits them in total (default 17).
	MaxConnsPerHost int
	MaxConns        int
	// IdleConnTimeout closes connections idle this long (default 30s).
	IdleConnTimeout time.Duration
	// MaxSizeHints bounds how many Content-Lengths (by URL) are remembered
	// as size hints for later requests (default 4096; negative: none).
	MaxSizeHints int
	// TwoStep, if positive, turns on the paper's two-step download for GETs
	// without a size hint: first a range request for TwoStep bytes (8 KiB
	// is a good value: it fits an initial congestion window) sent as a
	// small query, then the rest as a request whose size the policy now
	// knows. The caller gets one ordinary 200 response.
	TwoStep int
	// Aggregate, if set, fetches GETs of large objects in byte ranges over
	// all permitted paths at once (see Aggregate): multipath without MPTCP.
	// The caller reads one ordinary 200 response, byte for byte what a
	// plain GET would give; the ranges carry If-Range with the first
	// one's validator, so a changed object ends the body with
	// ErrObjectChanged instead of being stitched from two versions. A path
	// that fails mid-download leaves its ranges to the others. Requests
	// with multipath=off, a Range header or a body are not split. Without
	// it, requests whose intents ask for multipath=aggregate are split
	// (with the defaults) where MPTCP is not available.
	Aggregate *Aggregate

	once   sync.Once
	core   *core
	inner  *http.Transport
	dialer *Dialer
	sizes  sizeCache

	statsMu sync.Mutex
	stats   map[string]*TransportPathStats
}

// TransportPathStats count, per path, the requests a Transport sent and
// the response bodies it read: the goodput samples of the path estimator.
type TransportPathStats struct {
	PathStats
	Requests      int64
	BytesReceived int64         // response body bytes read
	ReceiveTime   time.Duration // time from the response headers to the end of each body read
}

func (t *Transport) init() {
	t.once.Do(func() {
		base := t.Base
		if base == nil {
			base = http.DefaultTransport.(*http.Transport)
		}
		t.inner = base.Clone()
		t.inner.DialTLSContext = nil
		t.inner.DialContext = t.dialInner
		t.dialer = t.Dialer
		if t.dialer == nil {
			t.dialer = &Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		}
		idle := t.IdleConnTimeout
		t.core = newCore(t.Manager, t.MaxConnsPerHost, t.MaxConns, idle)
		t.sizes.max = t.MaxSizeHints
		if t.sizes.max == 0 {
			t.sizes.max = 4096
		}
		t.stats = map[string]*TransportPathStats{}
	})
}

// dialHolder carries a dial's choice into the inner transport's DialContext
// and the dialed socket out of it.
type dialHolder struct {
	choice Choice
	intent Multipath
	raw    net.Conn
}

type dialHolderKey struct{}

func (t *Transport) dialInner(ctx context.Context, network, address string) (net.Conn, error) {
	h, ok := ctx.Value(dialHolderKey{}).(*dialHolder)
	if !ok {
		return nil, errors.New("intents: inner transport used outside a decision")
	}
	host, port, err := splitHostPort(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c, err := t.dialer.dialChoice(ctx, t.core.m, network, host, port, h.choice, h.intent)
	h.raw = c
	return c, err
}

// clientConn is an *http.ClientConn in the pool.
type clientConn struct{ cc *http.ClientConn }

func (c *clientConn) available() int                                    { return c.cc.Available() }
func (c *clientConn) inFlight() int                                     { return c.cc.InFlight() }
func (c *clientConn) reserve() bool                                     { return c.cc.Reserve() == nil }
func (c *clientConn) unreserve()                                        { c.cc.Release() }
func (c *clientConn) dead() bool                                        { return c.cc.Err() != nil }
func (c *clientConn) close()                                            { c.cc.Close() }
func (c *clientConn) quietWhenIdle() bool                               { return false }
func (c *clientConn) watch(hook func())                                 { c.cc.SetStateHook(func(*http.ClientConn) { hook() }) }
func (c *clientConn) roundTrip(r *http.Request) (*http.Response, error) { return c.cc.RoundTrip(r) }

// RoundTrip sends req on the path and connection the policy chooses for
// the intents in req's context. A request on a reused connection that died
// before any response arrived, or whose path went down before any response
// arrived, is sent again, once, if it can be replayed safely (an idempotent
// method, and a body that can be had again): on another connection, and in
// the second case on another path. Others fail, with a *PathDownError if
// their path went down.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.init()
	if cfg, ok := t.aggregateConfig(req); ok {
		return t.aggregate(req, cfg)
	}
	if t.TwoStep > 0 && t.twoStepApplies(req) {
		return t.twoStep(req)
	}
	return t.roundTrip(req)
}

func (t *Transport) roundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("intents: nil Request.URL")
	}
	scheme := req.URL.Scheme
	if scheme != "http" && scheme != "https" {
		closeBody(req)
		return nil, errors.New("intents: unsupported protocol scheme " + strconv.Quote(scheme))
	}
	host := strings.ToLower(req.URL.Hostname())
	if host == "" {
		closeBody(req)
		return nil, errors.New("intents: no Host in request URL")
	}
	portText := req.URL.Port()
	if portText == "" {
		portText = "80"
		if scheme == "https" {
			portText = "443"
		}
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		closeBody(req)
		return nil, errors.New("intents: bad port in request URL: " + portText)
	}
	ctx := req.Context()
	in, _ := FromContext(ctx)
	isGet := req.Method == http.MethodGet || req.Method == ""
	var url string // computed once, only when size hints need it
	if isGet && t.sizes.max > 0 {
		url = req.URL.String()
		if in.SizeToBeReceived == 0 {
			in.SizeToBeReceived = t.sizes.get(url)
		}
	}
	hostPort := net.JoinHostPort(host, portText)
	key := scheme + "://" + hostPort
	dest := Destination{Network: "tcp", Host: host, Port: uint16(port), TLS: scheme == "https"}
	dial := func(ctx context.Context, ch Choice) (pooled, net.Conn, error) {
		h := &dialHolder{choice: ch, intent: in.Multipath}
		cc, err := t.inner.NewClientConn(context.WithValue(ctx, dialHolderKey{}, h), scheme, hostPort)
		if err != nil {
			return nil, nil, err
		}
		return &clientConn{cc: cc}, h.raw, nil
	}
	for attempt := 0; ; attempt++ {
		a, err := t.core.acquire(ctx, key, dest, &in, dial)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		e, reused := a.e, a.reused
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: e.raw, Reused: reused, WasIdle: a.wasIdle, IdleTime: a.idle})
		}
		t.count(e.path, func(s *TransportPathStats) { s.Requests++ })
		expect := max(in.SizeToBeReceived, 0) // counted as pending on e by acquire
		resp, err := e.c.(*clientConn).roundTrip(req)
		if err != nil {
			e.addPending(-expect)
			down := e.pathDown.Load()
			if attempt == 0 && ctx.Err() == nil && (reused || (down && e.path != nil)) {
				// A reused connection the server had closed, or a path that
				// went down before any of the response came: once more, on
				// another path in the second case, if that is safe.
				if again, ok := rewind(req); ok {
					req = again
					if down {
						in = in.without(e.path)
					}
					continue
				}
			}
			return nil, e.pathErr(err)
		}
		if url != "" && resp.ContentLength >= 0 && resp.StatusCode == http.StatusOK {
			t.sizes.put(url, resp.ContentLength)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil && resp.Body != http.NoBody {
			cb := &countingBody{rc: resp.Body, t: t, e: e, start: time.Now()}
			cb.expect.Store(expect)
			resp.Body = cb
		} else {
			e.addPending(-expect)
		}
		return resp, nil
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// rewind returns req ready to be sent again, if that is safe: an
// idempotent method (or an Idempotency-Key header) and a body that can be
// had again.
func rewind(req *http.Request) (*http.Request, bool) {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		if req.Header.Get("Idempotency-Key") == "" && req.Header.Get("X-Idempotency-Key") == "" {
			return nil, false
		}
	}
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	if req.GetBody == nil {
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

func (t *Transport) count(p *Path, f func(*TransportPathStats)) {
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	s := t.stats[pathName(p)]
	if s == nil {
		s = &TransportPathStats{}
		t.stats[pathName(p)] = s
	}
	f(s)
}

// Stats returns per-path counts of connections, requests and received
// bytes; the key "" is connections the OS routed.
func (t *Transport) Stats() map[string]TransportPathStats {
	t.init()
	pool := t.core.pathStats()
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	out := make(map[string]TransportPathStats, len(t.stats))
	for name, s := range t.stats {
		v := *s
		v.PathStats = pool[name]
		out[name] = v
	}
	for name, ps := range pool {
		if _, ok := out[name]; !ok {
			out[name] = TransportPathStats{PathStats: ps}
		}
	}
	return out
}

// CloseIdleConnections closes the connections with no request in flight.
func (t *Transport) CloseIdleConnections() {
	t.init()
	t.core.closeIdle()
}

// countingBody counts a response body's bytes for the path's statistics.
type countingBody struct {
	rc     io.ReadCloser
	t      *Transport
	e      *entry
	start  time.Time
	n      atomic.Int64 // Close may race with Read
	expect atomic.Int64 // of the entry's pending bytes, what this body still owes
	done   atomic.Bool
	// The rate sample starts after the first Read: what that returns was
	// mostly buffered with the headers, and a 1 KB body read in
	// microseconds would claim a capacity of gigabits.
	sampleFrom     atomic.Int64 // bytes read by the first Read
	sampleStart    atomic.Int64 // its time, Unix nanoseconds; 0 before it
	pathDelivered0 atomic.Int64 // the path's delivered bytes then
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	total := b.n.Add(int64(n))
	b.e.bytesIn.Add(int64(n))
	if n > 0 {
		var onPath int64
		if !b.e.mptcp { // its bytes came over several paths
			onPath = b.e.path.delivered(int64(n))
		}
		if b.sampleStart.Load() == 0 {
			b.sampleFrom.Store(total)
			b.pathDelivered0.Store(onPath)
			b.sampleStart.Store(time.Now().UnixNano())
		}
	}
	for {
		owed := b.expect.Load()
		dec := min(int64(n), owed)
		if dec <= 0 {
			break
		}
		if b.expect.CompareAndSwap(owed, owed-dec) {
			b.e.addPending(-dec)
			break
		}
	}
	if err != nil {
		b.finish()
	}
	return n, b.e.pathErr(err)
}

func (b *countingBody) Close() error {
	err := b.rc.Close()
	b.finish()
	return err
}

func (b *countingBody) finish() {
	if b.done.Swap(true) {
		return
	}
	b.e.addPending(-b.expect.Swap(0))
	now := time.Now()
	d := now.Sub(b.start)
	n := b.n.Load()
	if from := b.sampleStart.Load(); from != 0 {
		// An MPTCP connection's bytes came over several paths: its own rate
		// is all it tells, and it is charged to its first path (a policy
		// that uses MPTCP learns nothing else about it).
		pathBytes := int64(0)
		if !b.e.mptcp {
			pathBytes = b.e.path.delivered(0) - b.pathDelivered0.Load()
		}
		b.e.path.sampleTransfer(n-b.sampleFrom.Load(), pathBytes, now.Sub(time.Unix(0, from)))
	}
	b.t.count(b.e.path, func(s *TransportPathStats) {
		s.BytesReceived += n
		s.ReceiveTime += d
	})
}

// sizeCache remembers the Content-Length of URLs, as size hints for later
// requests, forgetting the oldest beyond max entries.
type sizeCache struct {
	max   int
	mu    sync.Mutex
	sizes map[string]int64
	order []string
}

func (c *sizeCache) get(url string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sizes[url]
}

func (c *sizeCache) put(url string, size int64) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sizes == nil {
		c.sizes = map[string]int64{}
	}
	if _, ok := c.sizes[url]; !ok {
		c.order = append(c.order, url)
		if len(c.order) > c.max {
			delete(c.sizes, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.sizes[url] = size
}
