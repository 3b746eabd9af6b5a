// Package proxy is an intent-aware forward proxy for programs that cannot
// carry intents themselves: a browser, curl, a package manager. Plain
// HTTP requests go through an intents.Transport, each decided, pooled,
// sized and resumed like any of its requests; CONNECT and SOCKS5 tunnels
// are connections an intents.Dialer places. Intents come from the
// listener a client connects to, from rules by destination, and from an
// Intents request header, merged in that order: a later source may refine
// an earlier one and add prohibitions, never lift one. Serve takes plain
// HTTP clients; ServeTLS is an HTTPS proxy, to which a browser speaks
// HTTP/2 and so hands every request of a page at once; ServeSOCKS takes
// SOCKS5 clients; ServeTransparent takes the connections a packet filter
// redirected from programs that know no proxy.
//
// A Server is safe by default: it serves this host's own programs only,
// forwards and tunnels to ports 80, 443 and 8080 only and never to its
// own host, and bounds what each client may hold: places on a listener
// (idle and request-less clients make room for new ones), tunnels (a
// share per client address, closed when quiet), upstream connections (a
// pool per client address) and the time each step may take.
package proxy

import (
	"cmp"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/hostport"
)

// Defaults of a Server's limits.
const (
	DefaultMaxHeaderBytes    = 32 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxClients        = 1024
	DefaultMaxTunnels        = 1024
	DefaultDialTimeout       = 30 * time.Second
)

// Server is an HTTP and SOCKS5 forward proxy. Set its fields before the
// first Serve; they are not to be changed after.
type Server struct {
	// Transport carries plain HTTP requests: each client address's
	// through a clone of its own (at most 64 kept, the least recently
	// used dropped), so that one client's hanging requests hold none of
	// another's connections; with SharedPool, all through Transport
	// itself. Dialer opens tunnels (CONNECT, SOCKS5). Both are required;
	// they usually share a Manager.
	Transport  *intents.Transport
	SharedPool bool
	Dialer     *intents.Dialer
	// Rules give intents by destination; the first that matches applies.
	Rules []Rule
	// PAC routes destinations to listeners in the PAC file served at
	// PACPath; the rest go to the listener the file came from.
	PAC []PACRoute
	// Allow are the client networks served; others get 403 (SOCKS5: its
	// "not allowed" reply). Nil: this host's own programs only (from a
	// loopback address or one of the host's own).
	Allow []netip.Prefix
	// MetricsAllow are the client networks ServeMetrics serves. Nil:
	// loopback only, whatever Allow says.
	MetricsAllow []netip.Prefix
	// User and Password, if User is set, are asked of every client: Basic
	// proxy authentication (407 without), SOCKS5 username/password.
	User, Password string
	// Ports are the ports the proxy forwards requests and tunnels to.
	// Nil: DefaultPorts. AnyPort lifts the limit: a proxy that serves
	// only trusted clients.
	Ports   []uint16
	AnyPort bool
	// AllowLocal lets clients reach the proxy's own host: its loopback
	// and interface addresses, localhost. Off by default, so that a
	// client cannot reach through the proxy the services that listen
	// only for the host. Its own listeners are refused either way.
	AllowLocal bool
	// MaxHeaderBytes bounds a request's line and headers (431 beyond).
	// ReadHeaderTimeout bounds reading them, IdleTimeout a client
	// connection's wait for its next request. Zero: the defaults above.
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// MaxClients bounds the client connections served at once on each
	// listener, counting only clients Allow admits and not those whose
	// connection became a tunnel; one client address (an IPv6 client's
	// /64) holds a quarter of them, the programs on the proxy's own host
	// all. At the limit a new client takes the place of one that has sent
	// nothing for a second (a TLS handshake or SOCKS5 greeting not
	// finished, nothing unread in its socket), else, once no new
	// connection is within its first second, of the one idle longest
	// between requests; with neither, it waits. MaxTunnels bounds
	// the tunnels open at once (more are refused: 503, or SOCKS5's
	// general failure). Zero: the defaults above.
	MaxClients, MaxTunnels int
	// MaxTunnelsPerClient bounds the tunnels of one client address (an
	// IPv6 client's /64), so that one client cannot hold them all. Zero:
	// a quarter of MaxTunnels. The programs on the proxy's own host (over
	// loopback or from its addresses) are its owner: together they may
	// hold all of MaxTunnels.
	MaxTunnelsPerClient int
	// TunnelIdleTimeout closes a tunnel that carried no byte either way
	// for this long. Zero: DefaultTunnelIdleTimeout; negative: never.
	TunnelIdleTimeout time.Duration
	// DialTimeout bounds opening a tunnel (504 beyond). Zero: the default.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a forwarded request's
	// response headers, from when the request was sent whole (504
	// beyond). Zero: DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// RequestBodyTimeout bounds the wait for the next part of a
	// forwarded request's body (408 beyond). Zero:
	// DefaultRequestBodyTimeout.
	RequestBodyTimeout time.Duration
	// Logger, if set, gets a line for each refusal and failure, and at
	// debug level each tunnel and request with its path.
	Logger *slog.Logger
	// PathHeader, if set, names a response header in which each
	// forwarded response tells the path its request went out on (for
	// diagnostics and tests). Off by default: a page's scripts could
	// read the host's interface names from it.
	PathHeader string

	once    sync.Once
	forward *httputil.ReverseProxy
	pools   *clientPools // nil with SharedPool
	sizes   *hostSizes
	stats   *stats

	watchOnce sync.Once
	done      chan struct{} // closed by Close

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]string // their PAC keyword
	limits    []*limitListener
	onPath    map[net.Conn]string // a TCP tunnel's end to close if its path goes down: the path's name
	servers   []*http.Server
	conns     map[net.Conn]bool // SOCKS5 clients and tunnels' ends
	tunnels   int
	tunnelsOf map[netip.Addr]int // by client address
	wg        sync.WaitGroup     // SOCKS5 clients and tunnels
}

// ErrServerClosed is returned by Serve and ServeSOCKS once Close was
// called.
var ErrServerClosed = errors.New("proxy: server closed")

// listenerIntentsKey carries a listener's intents to ServeHTTP.
type listenerIntentsKey struct{}

func (s *Server) init() {
	s.once.Do(func() {
		var m *intents.Manager
		if s.Dialer != nil {
			m = s.Dialer.Manager
		}
		s.sizes = newHostSizes(maxHosts, m)
		s.stats = newStats()
		var upstream http.RoundTripper = s.Transport
		if !s.SharedPool && s.Transport != nil {
			s.pools = newClientPools(s.Transport)
			upstream = s.pools
		}
		s.forward = &httputil.ReverseProxy{
			Rewrite:        s.rewrite,
			ModifyResponse: s.modifyResponse,
			Transport:      upstream,
			ErrorHandler:   s.forwardError,
			ErrorLog:       slogErrorLog(s.Logger),
			BufferPool:     relayBufferPool{},
		}
		s.done = make(chan struct{})
		s.listeners = map[net.Listener]string{}
		s.conns = map[net.Conn]bool{}
		s.onPath = map[net.Conn]string{}
		s.tunnelsOf = map[netip.Addr]int{}
	})
}

// Serve serves HTTP proxy clients (absolute-form requests and CONNECT)
// accepted on l, with intents in for every request that comes through
// it. It returns when l fails or Close is called (ErrServerClosed).
func (s *Server) Serve(l net.Listener, in intents.Intents) error {
	return s.serve(l, nil, in)
}

// ServeTLS is Serve over TLS with config (its certificate the proxy's):
// an HTTPS proxy, which clients reach with HTTP/2 if they offer it
// (ALPN), else HTTP/1.1. Over HTTP/2 a client sends all of a page's
// requests on one connection at once, where over HTTP/1.1 a browser
// keeps a few connections per host to its proxy and so hands the proxy
// only as many requests at a time: the proxy schedules a page's whole
// queue only when it sees it. Give the Transport a browser's limits then
// (intents.DefaultMaxConnsPerHost, DefaultMaxConns): without them a page
// that arrives at once opens a connection per request, whose slow starts
// contend.
func (s *Server) ServeTLS(l net.Listener, config *tls.Config, in intents.Intents) error {
	if config == nil || (len(config.Certificates) == 0 && config.GetCertificate == nil && config.GetConfigForClient == nil) {
		l.Close()
		return errors.New("proxy: ServeTLS needs a certificate")
	}
	return s.serve(l, config.Clone(), in)
}

// serve serves l, over TLS with config if it is set.
func (s *Server) serve(l net.Listener, config *tls.Config, in intents.Intents) error {
	s.init()
	hs := &http.Server{
		TLSConfig:         config,
		Handler:           s,
		MaxHeaderBytes:    orDefault(s.MaxHeaderBytes, DefaultMaxHeaderBytes),
		ReadHeaderTimeout: orDefault(s.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		IdleTimeout:       orDefault(s.IdleTimeout, DefaultIdleTimeout),
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), listenerIntentsKey{}, in)
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, clientConnKey{}, c)
		},
		ErrorLog: slogErrorLog(s.Logger),
	}
	kind := pacProxy
	if config != nil {
		kind = pacHTTPS
		// An HTTP/2 client quiet for the header timeout is pinged, and
		// closed if the ping goes unanswered as long: one that stopped
		// halfway through a header block cannot answer (RFC 9113 §6.10),
		// and would else hold its connection until the idle timeout.
		wait := orDefault(s.ReadHeaderTimeout, DefaultReadHeaderTimeout)
		hs.HTTP2 = &http.HTTP2Config{SendPingTimeout: wait, PingTimeout: wait}
		// HTTP/2 by golang.org/x/net/http2 over a schemeConn, which
		// recovers each request's :scheme; so net/http's own is off, and
		// h2 must be offered here.
		hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){"h2": serveHTTP2(&http2.Server{})}
		if !slices.Contains(config.NextProtos, "h2") {
			config.NextProtos = append([]string{"h2"}, config.NextProtos...)
		}
	}
	if !s.addListener(l, hs, kind) {
		return ErrServerClosed
	}
	limited := s.newLimitListener(l, orDefault(s.MaxClients, DefaultMaxClients), s.allowed)
	hs.ConnState = limited.connState
	var err error
	if config != nil {
		err = hs.ServeTLS(limited, "", "") // HTTP/2 and HTTP/1.1 by ALPN
	} else {
		err = hs.Serve(framingListener{limited})
	}
	if errors.Is(err, http.ErrServerClosed) {
		return ErrServerClosed
	}
	return err
}

// newLimitListener wraps l, one of the server's listeners, in the limits
// of its clients: max at once, those allowed admits.
func (s *Server) newLimitListener(l net.Listener, max int, allowed func(remote string) bool) *limitListener {
	ll := newLimitListener(l, max, allowed)
	s.mu.Lock()
	s.limits = append(s.limits, ll)
	s.mu.Unlock()
	return ll
}

// addListener registers l, served by hs if set, as a listener of kind
// (its PAC keyword; "" for none).
func (s *Server) addListener(l net.Listener, hs *http.Server, kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		l.Close()
		return false
	}
	s.listeners[l] = kind
	if hs != nil {
		s.servers = append(s.servers, hs)
	}
	return true
}

// Close closes the listeners, the client connections and the tunnels,
// and waits for their goroutines.
func (s *Server) Close() error {
	s.init()
	s.mu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	servers := s.servers
	var toClose []interface{ Close() error }
	for l := range s.listeners {
		toClose = append(toClose, l)
	}
	for c := range s.conns {
		toClose = append(toClose, c)
	}
	s.mu.Unlock()
	for _, hs := range servers {
		hs.Close() // its listener and every client connection, hijacked ones aside
	}
	for _, c := range toClose {
		c.Close()
	}
	s.wg.Wait()
	s.sizes.close()
	if s.pools != nil {
		s.pools.close()
	}
	return nil
}

// track registers c, a SOCKS5 client or a tunnel's end, for Close; false
// if the server is closed (c is then closed).
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = true
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// isPACRequest reports whether r asks the proxy itself for its PAC file:
// a GET of PACPath in origin form (over HTTP/2, with the proxy's own
// authority).
func (s *Server) isPACRequest(r *http.Request) bool {
	if r.Method != http.MethodGet || r.URL.Host != "" || r.URL.Path != PACPath {
		return false
	}
	if r.ProtoMajor == 2 && r.Host != "" {
		host, port := splitHostPort(r.Host, defaultPort(requestScheme(r)))
		return s.isSelf(host, port)
	}
	return true
}

// ServeHTTP serves one proxy request: CONNECT opens a tunnel, an
// absolute-form request is forwarded. Used as a handler on its own (not
// through Serve), a request carries no listener intents.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	if !s.allowed(r.RemoteAddr) {
		s.refuse(w, r, http.StatusForbidden, "client not allowed")
		return
	}
	if s.isPACRequest(r) {
		// Without credentials: a browser fetches its PAC file with none.
		s.servePAC(w, r)
		return
	}
	if !s.authorized(r.Header.Get("Proxy-Authorization")) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="intents proxy"`)
		s.refuse(w, r, http.StatusProxyAuthRequired, "proxy authentication required")
		return
	}
	if viaUs(r.Header) {
		s.refuse(w, r, http.StatusLoopDetected, "the request came through this proxy already")
		return
	}
	in, err := s.requestIntents(r)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, "bad Intents header: "+err.Error())
		return
	}
	if r.Method == http.MethodConnect {
		s.connect(w, r, in)
		return
	}
	if r.ProtoMajor == 2 && r.Method != http.MethodConnect && r.URL.Host == "" {
		// HTTP/2 carries a proxy request's origin in :authority, its path
		// alone in :path (RFC 9113 §8.3.1) and its scheme in :scheme,
		// which net/http drops and requestScheme recovers: an https
		// origin's request is fetched over TLS, never in the clear.
		scheme := requestScheme(r)
		if host, port := splitHostPort(r.Host, defaultPort(scheme)); r.Host != "" && !s.isSelf(host, port) {
			if scheme == "" {
				s.refuse(w, r, http.StatusBadRequest, "the request's scheme cannot be told")
				return
			}
			r.URL.Scheme, r.URL.Host = scheme, r.Host
		}
	}
	if !(r.URL.Scheme == "http" || r.URL.Scheme == "https" && r.ProtoMajor == 2) || r.URL.Host == "" {
		// An origin-form request: this is no web server. An https URL in
		// the clear over HTTP/1: a client that meant CONNECT.
		s.refuse(w, r, http.StatusBadRequest, "not a proxy request (absolute http URL or CONNECT)")
		return
	}
	host, port := splitHostPort(r.URL.Host, defaultPort(r.URL.Scheme))
	if host == "" || port == 0 {
		s.refuse(w, r, http.StatusBadRequest, "the URL's host or port is malformed")
		return
	}
	if status, err := s.checkDestination(host, port); err != nil {
		s.refuse(w, r, status, err.Error())
		return
	}
	ctx := context.WithValue(intents.WithIntents(r.Context(), in), clientKey{}, shareOf(r.RemoteAddr))
	ctx, stop := s.withResponseHeaderTimeout(ctx)
	defer stop()
	if r.ProtoMajor == 1 {
		defer resetOnAbort(ctx)
		// RFC 9112 §6.1: close after a request framed both ways. Over TLS
		// the watch cannot read what the client sent, and net/http drops
		// the Content-Length of a chunked request: every chunked request
		// there closes its connection (a chunked upload is rare; keeping
		// the connection is all it costs).
		c, _ := ctx.Value(clientConnKey{}).(net.Conn)
		if ambiguousFraming(c) || r.TLS != nil && slices.Contains(r.TransferEncoding, "chunked") {
			w.Header().Set("Connection", "close")
		}
	}
	s.stats.request()
	s.forward.ServeHTTP(w, s.withRequestBodyTimeout(w, r.WithContext(ctx)))
}

// clientConnKey carries a client's connection to its requests.
type clientConnKey struct{}

// resetOnAbort resets the client's connection when a response is
// aborted midway (its origin's body broke off): an HTTP/1.0 client, or
// one given a response without a length, reads to the connection's end,
// and would take an orderly close for the whole body.
func resetOnAbort(ctx context.Context) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		c, _ := ctx.Value(clientConnKey{}).(net.Conn)
		if tc, ok := under[*net.TCPConn](c); ok {
			tc.SetLinger(0)
			if _, overTLS := c.(*tls.Conn); overTLS {
				// Closing the TLS connection would send close_notify first:
				// an orderly end, the whole body to the client. The socket
				// is closed under it (the TLS connection's own Close still
				// gives back its place).
				tc.Close()
			}
		}
	}
	panic(v)
}

// defaultPort is the port of a URL of scheme that gives none.
func defaultPort(scheme string) uint16 {
	if scheme == "https" {
		return 443
	}
	return 80
}

// requestIntents are r's: its listener's, then its destination's rule,
// then its Intents header.
func (s *Server) requestIntents(r *http.Request) (intents.Intents, error) {
	in, _ := r.Context().Value(listenerIntentsKey{}).(intents.Intents)
	host, _ := splitHostPort(r.Host, 0)
	if r.Method != http.MethodConnect && r.URL != nil && r.URL.Host != "" {
		host, _ = splitHostPort(r.URL.Host, 0)
	}
	in = s.destIntents(in, host)
	if h := r.Header.Values("Intents"); len(h) > 0 {
		over, err := intents.ParseIntents(strings.Join(h, ","))
		if err != nil {
			return intents.Intents{}, err
		}
		in = in.Merge(over)
	}
	return in, nil
}

// destIntents merges the first rule for host over in.
func (s *Server) destIntents(in intents.Intents, host string) intents.Intents {
	if rule, ok := match(s.Rules, host); ok {
		in = in.Merge(rule)
	}
	return in
}

// via is this proxy's pseudonym in Via headers (RFC 9110 §7.6.3); a
// request that carries it came through here already.
const via = "intents-proxy"

func viaUs(h http.Header) bool {
	for _, v := range h.Values("Via") {
		for hop := range strings.SplitSeq(v, ",") {
			if f := strings.Fields(hop); len(f) >= 2 && f[1] == via {
				return true
			}
		}
	}
	return false
}

// forwardedHeaders are what httputil.ReverseProxy removes before Rewrite,
// for a reverse proxy to set: a forward proxy passes the client's on as
// they are, and adds none.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rewrite readies a forwarded request; httputil.ReverseProxy has removed
// the hop-by-hop headers, and removes them from the response too.
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	for _, h := range forwardedHeaders {
		if v := pr.In.Header.Values(h); len(v) > 0 {
			pr.Out.Header[h] = v
		}
	}
	pr.Out.Header.Del("Intents")
	pr.Out.Header.Add("Via", receivedProtocol(pr.In)+" "+via)
	pr.Out.RequestURI = ""
	if s.PathHeader != "" || s.debugging(pr.In.Context()) {
		var path atomic.Pointer[string]
		ctx := httptrace.WithClientTrace(pr.Out.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			p, _ := intents.PathOf(i.Conn)
			name := p.String()
			path.Store(&name)
		}})
		pr.Out = pr.Out.WithContext(context.WithValue(ctx, pathKey{}, &path))
	}
}

// receivedProtocol is r's protocol version as a Via header gives it:
// "1.1", "2" (RFC 9110 §7.6.3).
func receivedProtocol(r *http.Request) string {
	if r.ProtoMajor >= 2 {
		return strconv.Itoa(r.ProtoMajor)
	}
	return fmt.Sprintf("%d.%d", r.ProtoMajor, r.ProtoMinor)
}

// pathKey carries, with PathHeader set, where a forwarded request's path
// is noted, to modifyResponse.
type pathKey struct{}

// modifyResponse adds the path header to a forwarded response, if asked,
// and logs the response with its path at debug level.
func (s *Server) modifyResponse(resp *http.Response) error {
	if resp.Request == nil {
		return nil
	}
	path, ok := resp.Request.Context().Value(pathKey{}).(*atomic.Pointer[string])
	if !ok || path.Load() == nil {
		return nil
	}
	if s.PathHeader != "" {
		resp.Header.Set(s.PathHeader, *path.Load())
	}
	if ctx := resp.Request.Context(); s.debugging(ctx) {
		s.Logger.Log(ctx, slog.LevelDebug, "proxy: request", "method", resp.Request.Method, "url", resp.Request.URL.String(),
			"status", resp.StatusCode, "path", *path.Load())
	}
	return nil
}

// debugging reports whether the Logger takes debug lines.
func (s *Server) debugging(ctx context.Context) bool {
	return s.Logger != nil && s.Logger.Enabled(ctx, slog.LevelDebug)
}

// forwardError answers a forwarded request that failed before its
// response: 504 if it timed out, else 502, with the reason.
func (s *Server) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	s.stats.failure(err)
	status := http.StatusBadGateway
	if bodyTimedOut(r) {
		err, status = ErrRequestBodyTimeout, http.StatusRequestTimeout
	} else if cause := context.Cause(r.Context()); errors.Is(cause, ErrResponseHeaderTimeout) {
		err, status = cause, http.StatusGatewayTimeout
	} else if isTimeout(err) {
		status = http.StatusGatewayTimeout
	}
	if r.Context().Err() != nil && status != http.StatusGatewayTimeout && status != http.StatusRequestTimeout {
		// The client went away: nobody to answer.
		s.log(r.Context(), slog.LevelDebug, "client gone", r, err)
		return
	}
	s.refuse(w, r, status, err.Error())
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// refuse answers r with status and a one-line reason, and logs it once.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, reason string) {
	s.log(r.Context(), slog.LevelInfo, "refused", r, errors.New(reason), "status", status)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if r.ProtoMajor < 2 {
		// Over HTTP/2 this would end the client's other streams too.
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, "intents proxy: %s\n", oneLine(reason))
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	return strings.ReplaceAll(s, "\n", " ")
}

func (s *Server) log(ctx context.Context, l slog.Level, msg string, r *http.Request, err error, attrs ...any) {
	if s.Logger == nil {
		return
	}
	args := append([]any{"client", r.RemoteAddr, "method", r.Method, "target", r.RequestURI}, attrs...)
	if err != nil {
		args = append(args, "err", err)
	}
	s.Logger.Log(ctx, l, "proxy: "+msg, args...)
}

// allowed reports whether a client at remote ("addr:port") may use the
// proxy.
func (s *Server) allowed(remote string) bool {
	a := clientOf(remote)
	if !a.IsValid() {
		return false
	}
	if s.Allow == nil {
		// The host's own programs: over loopback, or from one of its
		// addresses (which the kernel takes from no other host).
		return a.IsLoopback() || hostAddrs.has(a)
	}
	return inPrefixes(s.Allow, a)
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

// authorized checks a Proxy-Authorization header, in constant time.
func (s *Server) authorized(h string) bool {
	if s.User == "" {
		return true
	}
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return false
	}
	user, pass, _ := strings.Cut(string(raw), ":")
	return s.credentialsMatch(user, pass)
}

func (s *Server) credentialsMatch(user, pass string) bool {
	u := subtle.ConstantTimeCompare([]byte(user), []byte(s.User))
	p := subtle.ConstantTimeCompare([]byte(pass), []byte(s.Password))
	return u&p == 1
}

// isSelf reports whether host:port is one of the server's listeners: a
// literal address (or a loopback name) at a listener's port, on the
// listener's address or, for one on an unspecified address, any.
func (s *Server) isSelf(host string, port uint16) bool {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		if !strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
			return false
		}
		a = netip.IPv6Loopback()
	}
	return s.isListener(netip.AddrPortFrom(a.Unmap(), port))
}

// isListener reports whether ap is the address of one of the server's
// listeners (loopback addresses count as one another's).
func (s *Server) isListener(ap netip.AddrPort) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.listeners {
		la, err := netip.ParseAddrPort(l.Addr().String())
		if err != nil || la.Port() != ap.Port() {
			continue
		}
		lip := la.Addr().Unmap()
		if lip.IsUnspecified() || lip == ap.Addr() || (lip.IsLoopback() && ap.Addr().IsLoopback()) {
			return true
		}
	}
	return false
}

// splitHostPort splits a request's "host:port", with def for a missing
// port; port 0 where it is no port.
func splitHostPort(hp string, def uint16) (string, uint16) {
	host, port, _ := hostport.Split(context.Background(), "tcp", hp, def)
	return host, port
}

// slogErrorLog is the http.Server's error log: l's, at level Info, or
// none.
func slogErrorLog(l *slog.Logger) *log.Logger {
	if l == nil {
		return log.New(io.Discard, "", 0)
	}
	return slog.NewLogLogger(l.Handler(), slog.LevelInfo)
}

// orDefault is v, or def where v is zero or less (a setting left unset).
func orDefault[T int | time.Duration](v, def T) T { return cmp.Or(max(v, 0), def) }
