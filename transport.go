package intents

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sockintents/intents/internal/estimate"
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
// Without a size hint in a GET's intents the Transport predicts one, so
// that a policy such as EAF can place requests without the caller's help:
// the last response size of the same URL, else the median of the origin's
// recent responses, else, for an origin not heard from yet, of every
// origin's, looked up again each time the request is decided
// (DecisionInfo.SizeSource says which). Once a response's headers are in,
// its Content-Length is what its connection and path are known to owe.
// While it dials a destination's first connection on one path, it opens
// a spare connection to the destination on each of the request's other
// permitted paths (within the connection limits, and where idle ones are
// kept; not on an expensive or constrained path, one the request avoids,
// nor with Base's own dialer): its handshake measures the path's RTT, so
// that a policy knows it before it sends a request that way, and a
// request sent there finds the connection open, one round trip sooner
// (two with TLS). An unused spare is an idle connection like the others,
// closed by the idle limits or to make room at MaxConnsPerHost, and the
// first closed where the policy wants a new connection on another path
// at the host's limit. A path that gets no spare and that no transfer has
// measured yet is measured with a bare TCP handshake (opened and closed
// at once, one at a time per path; not through a proxy).
// While such a handshake is out and a burst of requests goes to an origin
// not heard from yet (a page's other hosts, right after its root
// document), predicted at a size that stands on fewer than three
// responses (two where the second is the smaller), that destination gets
// at most three connections on the measured paths; the rest of the burst
// waits until the page's first responses' headers tell their sizes, at
// most four round trips of the nearest path, so that its connections open
// on the page's own sizes, not the root's.
//
// A GET's response body of known length that can be had by byte range (a
// strong validator, Accept-Ranges: bytes, no content coding; on a path
// the Transport chose, not through a proxy) resumes where it broke off:
// when its path goes down, or when its HTTP/1 connection stalls mid-body,
// its server waiting out a retransmission timeout while the path answers
// a probe, the rest is asked for with Range and If-Range on another
// connection, where the policy says. The caller reads the same bytes of
// one version, or an error (ErrObjectChanged); Stats counts these as
// Resumed.
//
// The protocol work stays in net/http: each connection is an
// *http.ClientConn (Go 1.26's Transport.NewClientConn) made by an inner
// http.Transport whose dialer binds the socket to the chosen path, so
// HTTP/1.1, HTTP/2, TLS and proxies behave as in net/http.
//
// The zero Transport behaves like http.DefaultTransport: no limit on
// connections per host, at most 2 idle ones kept per host and 100 in all,
// closed after 90 s idle (Base's settings). Browser-like limits (6 per
// host, 17 in all, as the Socket Intents paper's browsers) are a setting:
// MaxConnsPerHost and MaxConns. A Transport must not be copied after first
// use; Close ends it.
type Transport struct {
	// Manager supplies paths and policy. nil: operating system routing,
	// and DefaultManager for requests whose intents constrain paths.
	Manager *Manager
	// Base is the template of the inner transport: TLS configuration,
	// proxy (called with each real request; the connection pool keys by
	// the proxy chosen, as net/http does), protocols, timeouts and idle
	// limits (MaxIdleConns, MaxIdleConnsPerHost, IdleConnTimeout). Its
	// DialContext or Dial, if set, dials every connection instead of the
	// Dialer (the operating system routes it then, unless that function
	// binds it: see Manager.BindDialer), except a plain net.Dialer's DialContext
	// (as in http.DefaultTransport.Clone()), which the Dialer replaces;
	// MaxConnsPerHost applies as Transport.MaxConnsPerHost's default.
	// nil: http.DefaultTransport's settings, as they were when this
	// package was initialised.
	Base *http.Transport
	// Dialer dials the connections (Timeout, KeepAlive, Control...). nil:
	// 30 s timeout and keep-alive, as http.DefaultTransport.
	Dialer *Dialer
	// MaxConnsPerHost limits connections per scheme, host, port and proxy;
	// MaxConns limits them in total, closing the longest idle one to make
	// room when it binds. 0: no limit (MaxConnsPerHost: Base's, if set),
	// as in net/http; DefaultMaxConnsPerHost and DefaultMaxConns are the
	// browsers' limits.
	MaxConnsPerHost int
	MaxConns        int
	// IdleConnTimeout closes connections idle this long (0: Base's, which
	// is 90 s for http.DefaultTransport's settings; negative: never).
	IdleConnTimeout time.Duration
	// MaxSizeHints bounds how many Content-Lengths (by URL) are remembered
	// as size hints for later requests (default 4096; negative: none, and
	// no size is predicted). Each origin's last 32 sizes are kept besides.
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
	// HTTP3, if set, lets the Transport speak HTTP/3 (QUIC over a UDP
	// socket bound to the chosen path) to HTTPS origins that advertised it
	// with an Alt-Svc header (remembered per origin for its ma, at most
	// 24 h; only at the origin's own host), and with HTTP3Always to every
	// HTTPS origin. A new HTTP/3 connection races a TCP one started
	// HTTP3RaceDelay later, or at once if it fails: the first to connect
	// carries the request, and an origin whose HTTP/3 failed or lost on a
	// path is left on TCP there for 5 minutes, doubling with each failure
	// in a row up to a day (UDP may be blocked on one network only). HTTP/3 connections are pooled with the TCP ones, as
	// candidates with free streams. Not through a proxy, nor with Base's
	// own dial function, nor where the policy chose MPTCP. Package
	// github.com/sockintents/intents/h3 has the dialer: &h3.Dialer{}.
	HTTP3 HTTP3Dialer
	// HTTP3Always tries HTTP/3 first on every HTTPS origin, without
	// waiting for its Alt-Svc.
	HTTP3Always bool
	// HTTP3RaceDelay is how long a new HTTP/3 connection has before TCP
	// is raced against it (0: 250 ms; negative: never, so
	// a failed HTTP/3 dial fails the request).
	HTTP3RaceDelay time.Duration
	// DisableFirstRace turns off racing a first request. Else, where the
	// Manager's policy is a Racer (policy.EAF is), a GET or HEAD without a
	// body, sent while no path it may take has shown
	// anything of its capacity (a new Manager on networks its Knowledge
	// knows nothing of, before any transfer), goes on two of those paths
	// at once (the first two among the policy's choices for it, neither
	// avoided by the intents nor expensive), and the
	// response whose body is in first is returned, the other cancelled:
	// a handshake shows which path answers first, not which carries a
	// page's first object sooner, and the rest of the page is decided on
	// what that object showed. The start of each body, up to 64 KiB, is
	// read before the race is decided (a body of unknown length: the
	// headers decide). A path that lost although its round trips would
	// have let it win has shown a bound on its capacity, which stands as
	// its estimate until a transfer shows more. At most one race per
	// Transport, and none once a race has run over one of the Manager's
	// paths (its Knowledge remembers that too); the caller's
	// httptrace.ClientTrace sees the request on the first of the two
	// paths.
	DisableFirstRace bool

	initMu sync.Mutex
	ready  atomic.Bool // core, inner, dialer and sizes are set
	core   *core
	inner  *http.Transport
	proxy  func(*http.Request) (*url.URL, error)                             // Base's
	dial   func(ctx context.Context, network, addr string) (net.Conn, error) // Base's, if any
	dialer *Dialer
	sizes  *sizeCache      // a pointer: the core refers to it, and must not keep t reachable
	kept   transportMemory // what its Manager's knowledge saves of it (k nil: none)

	statsMu sync.Mutex                               // taken to add a path
	stats   atomic.Pointer[map[string]*pathCounters] // by path name; copied on write, read without a lock

	altMu    sync.Mutex
	altProto atomic.Pointer[map[string]http.RoundTripper] // RegisterProtocol's, copied on write

	originMu sync.Mutex
	origins  atomic.Pointer[map[originKey]origin] // copied on write; read per request without a lock

	altSvc   *altSvcCache // HTTP/3 alternatives by origin
	tlsH3    *tls.Config  // template of HTTP/3 connections' TLS settings
	raceOver atomic.Bool  // a first request was raced, or a path's capacity is known (see DisableFirstRace)

	testHookSplitRead func(got int64) // called as a split part's answer begins (0) and as its bytes arrive (see Splitter)
}

// origin is where a request URL goes, as the pool keys it.
type origin struct {
	scheme, host, hostPort, key string
	port                        uint16
	loopback                    bool // host is a loopback address or name
}

type originKey struct{ scheme, host string } // as in the URL

// maxOrigins bounds the origins a Transport remembers; past it the memory
// starts afresh (a lookup is only a shortcut).
const maxOrigins = 256

// originOf parses u's origin, once per scheme and URL host: the strings
// the pool keys connections by would otherwise be built for every request.
func (t *Transport) originOf(u *url.URL) (origin, error) {
	k := originKey{u.Scheme, u.Host}
	if m := t.origins.Load(); m != nil {
		if o, ok := (*m)[k]; ok {
			return o, nil
		}
	}
	scheme := u.Scheme
	if scheme != "http" && scheme != "https" {
		return origin{}, errors.New("intents: unsupported protocol scheme " + strconv.Quote(scheme))
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return origin{}, errors.New("intents: no Host in request URL")
	}
	portText := u.Port()
	if portText == "" {
		portText = "80"
		if scheme == "https" {
			portText = "443"
		}
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return origin{}, errors.New("intents: bad port in request URL: " + portText)
	}
	hostPort := net.JoinHostPort(host, portText)
	o := origin{scheme: scheme, host: host, hostPort: hostPort, key: scheme + "://" + hostPort, port: uint16(port),
		loopback: isLoopbackHost(host)}
	t.originMu.Lock()
	defer t.originMu.Unlock()
	next := map[originKey]origin{}
	if m := t.origins.Load(); m != nil && len(*m) < maxOrigins {
		maps.Copy(next, *m)
	}
	next[k] = o
	t.origins.Store(&next)
	return o, nil
}

// Clone returns a new Transport with t's settings (Base cloned), and
// none of its connections or learned state.
func (t *Transport) Clone() *Transport {
	c := &Transport{Manager: t.Manager, Dialer: t.Dialer, MaxConnsPerHost: t.MaxConnsPerHost, MaxConns: t.MaxConns,
		IdleConnTimeout: t.IdleConnTimeout, MaxSizeHints: t.MaxSizeHints, TwoStep: t.TwoStep,
		HTTP3: t.HTTP3, HTTP3Always: t.HTTP3Always, HTTP3RaceDelay: t.HTTP3RaceDelay, DisableFirstRace: t.DisableFirstRace}
	if t.Base != nil {
		c.Base = t.Base.Clone()
	}
	if t.Aggregate != nil {
		a := *t.Aggregate
		c.Aggregate = &a
	}
	if alt := t.altProto.Load(); alt != nil {
		m := maps.Clone(*alt)
		c.altProto.Store(&m)
	}
	return c
}

// RegisterProtocol has requests of scheme sent by rt, as
// http.Transport.RegisterProtocol does; rt may return
// http.ErrSkipAltProtocol to leave a request to t. It panics if scheme is
// registered already.
func (t *Transport) RegisterProtocol(scheme string, rt http.RoundTripper) {
	t.altMu.Lock()
	defer t.altMu.Unlock()
	var m map[string]http.RoundTripper
	if old := t.altProto.Load(); old != nil {
		if _, ok := (*old)[scheme]; ok {
			panic("protocol " + scheme + " already registered")
		}
		m = maps.Clone(*old)
	} else {
		m = map[string]http.RoundTripper{}
	}
	m[scheme] = rt
	t.altProto.Store(&m)
}

// stdTransport is http.DefaultTransport as this package found it: a
// Transport without Base takes its settings from it, even after a program
// made an intents.Transport its http.DefaultTransport.
var stdTransport = func() *http.Transport {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return t.Clone()
	}
	// Replaced before this package was initialised: its documented
	// settings.
	return &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, MaxIdleConns: 100,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ExpectContinueTimeout: time.Second}
}()

// userDial is the caller's own dial function in base, if it has one that
// is not a plain net.Dialer's: DialContext first, as net/http prefers it.
func userDial(base *http.Transport) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if base.DialContext != nil {
		if isNetDialerDial(base.DialContext) {
			return nil
		}
		return base.DialContext
	}
	//lint:ignore SA1019 the deprecated Dial is honoured, as net/http does
	if dial := base.Dial; dial != nil {
		return func(_ context.Context, network, addr string) (net.Conn, error) { return dial(network, addr) }
	}
	return nil
}

// isNetDialerDial reports whether f is a *net.Dialer's DialContext, as in
// http.DefaultTransport and its clones: the Dialer, which binds to the
// chosen path, does that job, so such a Base.DialContext is replaced, not
// honoured. (Method values of one method share their code pointer.)
func isNetDialerDial(f func(context.Context, string, string) (net.Conn, error)) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf((&net.Dialer{}).DialContext).Pointer()
}

// init sets the Transport up on first use. Nothing in it can fail, and it
// is marked done only at its end, so a Transport is never left half made.
func (t *Transport) init() {
	if t.ready.Load() {
		return
	}
	t.initMu.Lock()
	defer t.initMu.Unlock()
	if t.ready.Load() {
		return
	}
	base := t.Base
	if base == nil {
		base = stdTransport
	}
	inner := base.Clone()
	t.proxy = inner.Proxy
	t.dial = userDial(inner)
	//lint:ignore SA1019 the deprecated Dial is honoured, as net/http does; ours replaces it
	inner.Dial = nil
	inner.DialContext = t.dialInner
	//lint:ignore SA1019 a deprecated DialTLS is the caller's and stays
	if inner.DialTLSContext == nil && inner.DialTLS == nil {
		inner.DialTLSContext = t.dialTLSInner
	}
	// The proxy was chosen for the real request (see roundTrip): the inner
	// transport only gets it told.
	inner.Proxy = func(r *http.Request) (*url.URL, error) {
		if h, ok := r.Context().Value(dialHolderKey{}).(*dialHolder); ok {
			return h.proxy, nil
		}
		return nil, nil
	}
	// The pool keeps the limits: net/http's count of connections per host
	// does not know about ClientConns and underflows when they close.
	inner.MaxConnsPerHost = 0
	t.inner = inner
	// HTTP/3's TLS settings, copied now: net/http changes the inner
	// transport's on its first use.
	t.tlsH3 = &tls.Config{}
	if inner.TLSClientConfig != nil {
		t.tlsH3 = inner.TLSClientConfig.Clone()
	}
	t.tlsH3.NextProtos = []string{"h3"}
	t.dialer = t.Dialer
	if t.dialer == nil {
		t.dialer = &Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	}
	l := limits{maxPerHost: t.MaxConnsPerHost, maxTotal: max(t.MaxConns, 0), idleTimeout: t.IdleConnTimeout,
		idlePerHost: base.MaxIdleConnsPerHost, idleTotal: base.MaxIdleConns}
	if l.maxPerHost == 0 {
		l.maxPerHost = base.MaxConnsPerHost
	}
	if l.idleTimeout == 0 {
		l.idleTimeout = base.IdleConnTimeout
	}
	if l.idlePerHost == 0 { // as net/http's maxIdleConnsPerHost; negative: none kept
		l.idlePerHost = http.DefaultMaxIdleConnsPerHost
	}
	t.sizes, t.altSvc = t.newMemories()
	cfg := coreConfig{limits: l, originSize: t.sizes.originSize, originSettled: t.sizes.settled}
	if t.dial == nil { // a Base's own dialer is the user's to run
		// Not a method value: the core must not keep t reachable (see
		// the cleanup below).
		dialer, proxy, m := t.dialer, t.proxy, t.Manager
		cfg.measure = func(ctx context.Context, p *Path, dest Destination) {
			measurePath(ctx, dialer, proxy, m, p, dest)
		}
		cfg.warm = true
	}
	t.core = newCore(t.Manager, cfg)
	if t.Manager != nil {
		// A Transport dropped without Close still ends its subscription
		// to the Manager once it is collected, and leaves what it learnt
		// to be saved.
		runtime.AddCleanup(t, func(c *core) { c.unsubscribe() }, t.core)
		if t.Manager.knowledge != nil {
			runtime.AddCleanup(t, transportMemory.detach, t.kept)
		}
	}
	t.ready.Store(true)
}

// newMemories makes the Transport's memories of sizes and of HTTP/3
// alternatives: with its Manager's Knowledge, started from what was
// learnt last, under the file's key.
func (t *Transport) newMemories() (*sizeCache, *altSvcCache) {
	limit := cmp.Or(t.MaxSizeHints, 4096)
	if t.Manager == nil || t.Manager.knowledge == nil {
		var key [32]byte
		rand.Read(key[:])
		return newSizeCache(limit, key), &altSvcCache{key: key}
	}
	k := t.Manager.knowledge
	sizes, alts := newSizeCache(limit, k.key), &altSvcCache{key: k.key}
	t.kept = k.attachTransport(t.Manager, sizes, alts)
	return sizes, alts
}

// dialHolder carries a dial's choice into the inner transport's DialContext
// and the dialed socket out of it.
type dialHolder struct {
	choice Choice
	intent Multipath
	proxy  *url.URL
	raw    net.Conn
	tls    *tls.Conn // for HTTPS without a proxy
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
	var c net.Conn
	if t.dial != nil {
		c, err = t.dial(ctx, network, address)
	} else {
		c, err = t.dialer.dialChoice(ctx, t.core.m, network, host, port, h.choice, h.intent)
	}
	h.raw = c
	return c, err
}

// dialTLSInner dials as dialInner does and wraps the connection in TLS
// as net/http's Transport would (its TLSClientConfig, with the ALPN
// protocols it set there, and the server name), leaving the handshake to
// it, so its trace hooks see it as usual. It exists so that the pool has
// the *tls.Conn to give httptrace's GotConn, as net/http does.
// TLSHandshakeTimeout, which net/http applies only to handshakes of its
// own, is kept by a deadline that the handshake's end lifts.
func (t *Transport) dialTLSInner(ctx context.Context, network, address string) (net.Conn, error) {
	raw, err := t.dialInner(ctx, network, address)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		raw.Close()
		return nil, err
	}
	cfg := &tls.Config{}
	if t.inner.TLSClientConfig != nil {
		cfg = t.inner.TLSClientConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	if timeout := t.inner.TLSHandshakeTimeout; timeout > 0 {
		raw.SetDeadline(time.Now().Add(timeout))
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			raw.SetDeadline(time.Time{})
			if verify != nil {
				return verify(cs)
			}
			return nil
		}
	}
	tc := tls.Client(raw, cfg)
	if h, ok := ctx.Value(dialHolderKey{}).(*dialHolder); ok {
		h.tls = tc
	}
	return tc, nil
}

// measurePath connects to dest through p and closes the connection, for
// the pool (pathHealth.measureOthers): the handshake is a probe of p's RTT. Not
// where a proxy would carry the requests: the proxy's path is what counts.
func measurePath(ctx context.Context, d *Dialer, proxyOf func(*http.Request) (*url.URL, error), m *Manager, p *Path, dest Destination) {
	if proxyOf != nil {
		scheme := "http"
		if dest.TLS {
			scheme = "https"
		}
		u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(dest.Host, strconv.Itoa(int(dest.Port)))}
		if proxy, err := proxyOf(&http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}}); err != nil || proxy != nil {
			return
		}
	}
	d.probeRTT(ctx, m, p, dest)
}

// clientConn is an *http.ClientConn in the pool; tls is its TLS
// connection, where it has one that the pool made.
//
// Its request slots are counted here rather than with ClientConn.Reserve,
// which runs the connection's state hook on every call (a third of what
// taking a pooled connection cost). All slots are taken under the pool's
// lock, and a slot counts until its round trip has returned, so a request
// is never sent where it would wait for another's (RoundTrip would wait
// for a free slot, not fail).
type clientConn struct {
	cc       *http.ClientConn
	tls      *tls.Conn
	reserved atomic.Int32 // slots taken whose round trip has not returned
}

func (c *clientConn) available() int   { return max(c.cc.Available()-int(c.reserved.Load()), 0) }
func (c *clientConn) inFlight() int    { return c.cc.InFlight() + int(c.reserved.Load()) }
func (c *clientConn) unreserve()       { c.reserved.Add(-1) }
func (c *clientConn) dead() bool       { return c.cc.Err() != nil }
func (c *clientConn) close() error     { return c.cc.Close() }
func (c *clientConn) ownReader() bool  { return true }
func (c *clientConn) carrier() carrier { return carrierTCP }

// requests is its requests, not the pool's reservations besides, which
// count a request twice until its round trip returns.
func (c *clientConn) requests() int { return c.cc.InFlight() }
func (c *clientConn) watch(hook func()) {
	c.cc.SetStateHook(func(*http.ClientConn) { hook() })
}

// traceConn is the connection httptrace's GotConn is given: the TLS
// connection, as net/http gives it, or nil for the socket.
func (c *clientConn) traceConn() net.Conn {
	if c.tls != nil {
		return c.tls
	}
	return nil
}

// requestConn is a pooled connection that sends requests.
type requestConn interface {
	pooled
	roundTrip(*http.Request) (*http.Response, error)
	traceConn() net.Conn
}

func (c *clientConn) reserve() bool {
	if c.available() <= 0 {
		return false
	}
	c.reserved.Add(1)
	return true
}

// roundTrip sends r in the slot taken for it.
func (c *clientConn) roundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.cc.RoundTrip(r)
	c.reserved.Add(-1)
	return resp, err
}

// RoundTrip sends req on the path and connection the policy chooses for
// the intents in req's context. A request on a reused connection that died
// before any response arrived, or whose path went down before any response
// arrived, is sent again, once, if it can be replayed safely (an idempotent
// method, and a body that can be had again): on another connection, and in
// the second case on another path. A GET whose path goes down while its
// body arrives asks for the rest on another path, if it can be had with a
// range request (a strong validator, byte ranges): from the byte it
// reached, with If-Range, so the body is byte for byte one version or
// ends with ErrObjectChanged. Others fail, with a *PathDownError if their
// path went down.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.init()
	if alt := t.altProto.Load(); alt != nil && req.URL != nil {
		if rt := (*alt)[req.URL.Scheme]; rt != nil {
			if resp, err := rt.RoundTrip(req); err != http.ErrSkipAltProtocol {
				return resp, err
			}
		}
	}
	in, _ := FromContext(req.Context())
	if cfg, ok := t.aggregateConfigFor(req, &in); ok {
		return t.aggregate(req, cfg)
	}
	if t.TwoStep > 0 && t.twoStepApplies(req) {
		return t.twoStep(req)
	}
	if a, b, ok := t.firstRacePaths(req, &in); ok {
		return t.raceFirst(req, in, a, b)
	}
	return t.roundTripWith(req, in, nil)
}

// roundTrip sends req on a pooled connection, with the intents of its
// context; mv, if set, is the move it makes (see moveCheck.moveTo).
func (t *Transport) roundTrip(req *http.Request, mv *moveTicket) (*http.Response, error) {
	in, _ := FromContext(req.Context())
	return t.roundTripWith(req, in, mv)
}

// callerResumesKey marks a request whose caller asks for the rest of the
// body itself when its path goes down or its connection stalls: a
// two-step download's rest, an aggregated download's ranges. Its
// connection then closes on such a path as readily as one whose body
// resumes here (see entry.recoverable, pathHealth.resumeStalled).
type callerResumesKey struct{}

// callerResumes marks ctx's requests as resumed by their caller.
func callerResumes(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerResumesKey{}, true)
}

// resumedByCaller reports whether callerResumes marked ctx.
func resumedByCaller(ctx context.Context) bool {
	v, _ := ctx.Value(callerResumesKey{}).(bool)
	return v
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// pathCounters are a Transport's counts on one path.
type pathCounters struct {
	requests, bytesReceived, receiveNanos, moved, split, resumed atomic.Int64
}

// counters returns p's counters: a lookup without a lock on every request.
func (t *Transport) counters(p *Path) *pathCounters {
	name := pathName(p)
	if m := t.stats.Load(); m != nil {
		if pc := (*m)[name]; pc != nil {
			return pc
		}
	}
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	old := t.stats.Load()
	if old != nil && (*old)[name] != nil {
		return (*old)[name]
	}
	next := map[string]*pathCounters{}
	if old != nil {
		maps.Copy(next, *old)
	}
	pc := &pathCounters{}
	next[name] = pc
	t.stats.Store(&next)
	return pc
}

// Stats returns per-path counts of connections, requests and received
// bytes; the key "" is connections the OS routed.
func (t *Transport) Stats() map[string]PathStats {
	t.init()
	out := t.core.pathStats()
	var counted map[string]*pathCounters
	if m := t.stats.Load(); m != nil {
		counted = *m
	}
	for name, pc := range counted {
		ps := out[name]
		ps.Requests, ps.BytesReceived, ps.ReceiveTime = pc.requests.Load(), pc.bytesReceived.Load(), time.Duration(pc.receiveNanos.Load())
		ps.Moved, ps.Split, ps.Resumed = pc.moved.Load(), pc.split.Load(), pc.resumed.Load()
		out[name] = ps
	}
	return out
}

// CloseIdleConnections closes the connections with no request in flight.
func (t *Transport) CloseIdleConnections() {
	t.init()
	t.core.closeIdle()
}

// Close closes the idle connections (the others once their requests are
// done), ends the Transport's subscription to its Manager's path changes
// and makes later requests fail with an error that is net.ErrClosed. A
// Transport dropped without Close is ended when it is garbage collected
// (once its idle connections are closed).
func (t *Transport) Close() error {
	t.init()
	t.core.close()
	if t.kept.k != nil {
		t.kept.detach()
	}
	return nil
}

// firstFlightBody is how much of a body surely came in the sender's first
// flight: its initial window, less room for the response's headers.
const firstFlightBody = estimate.InitialWindow - 1<<10

// interimSampleEvery is how often a body still arriving tells its path's
// estimates what it has seen so far (see sampleSoFar).
const interimSampleEvery = 100 * time.Millisecond
