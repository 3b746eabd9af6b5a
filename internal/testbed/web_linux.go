package testbed

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// WebServer serves HTTP on every server host address: cleartext HTTP/1.1
// and HTTP/2 (h2c) on port 80, and HTTP/1.1 and HTTP/2 over TLS on port 443
// with a certificate of the testbed's own CA (and with WebOptions.HTTP3,
// HTTP/3 on UDP port 443). It logs every connection and
// request with the client's address, so tests can see which path was used.
//
// Every host serves /obj?size=N (or /obj/N, either with ?delay=DURATION to
// answer late): N bytes of ObjectByte, with
// Range, If-Range, ETag and Last-Modified support (none with ?dynamic, as
// a generated response). Handle adds virtual
// hosts, HandlePath paths on every host.
type WebServer struct {
	CA *CA

	tb        *Testbed
	hosts3    []netip.Addr // hosts that serve HTTP/3 too
	listeners []webListener
	runMu     sync.Mutex            // serialises Restart and the testbed's Close
	running   []func(graceful bool) // stops each server now serving
	listen    net.ListenConfig

	mu       sync.Mutex
	hosts    map[string]http.Handler
	prefixes []pathHandler
	conns    []*ConnLog
	requests []RequestLog
	onConn   []func(ConnLog)
}

// OnConn calls f (outside the server's lock) with every connection
// accepted from now on, as it is accepted.
func (w *WebServer) OnConn(f func(ConnLog)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onConn = append(w.onConn, f)
}

// ConnLog is what the server saw of one connection.
type ConnLog struct {
	Remote, Local netip.AddrPort
	TLS           bool
	Proto         string // of its first request: "HTTP/1.1" or "HTTP/2.0"
	Requests      int
}

// RequestLog is what the server saw of one request.
type RequestLog struct {
	Host, Method, URI string
	Remote, Local     netip.AddrPort
	Proto             string
	Range             string
	Via               string // the proxies it came through, if any
	Status            int
	Bytes             int64 // body bytes written
}

// WebOptions configure StartWeb.
type WebOptions struct {
	// NoMPTCP makes the listeners plain TCP (Go listens with MPTCP by
	// default, falling back to TCP for clients without it).
	NoMPTCP bool
	// IdleTimeout closes idle keep-alive connections (default: never).
	IdleTimeout time.Duration
	// HTTP3 serves HTTP/3 (quic-go) on UDP port 443 of every host too.
	HTTP3 bool
	// AdvertiseHTTP3 makes every response over TCP carry
	// Alt-Svc: h3=":443"; ma=3600.
	AdvertiseHTTP3 bool
	// Hosts are the server host addresses to serve (default: all of the
	// testbed's), leaving the others to other servers (nginx, say).
	Hosts []netip.Addr
}

// webListener is one TCP address the web server serves, and how.
type webListener struct {
	addr  string
	serve func(l net.Listener) (srv *http.Server, served <-chan struct{})
}

// ClientTLS returns a client TLS configuration that trusts the server.
func (w *WebServer) ClientTLS() *tls.Config { return &tls.Config{RootCAs: w.CA.Pool} }

// Handle serves host (a name without port) with h instead of the default.
func (w *WebServer) Handle(host string, h http.Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hosts[strings.ToLower(host)] = h
}

// pathHandler serves the paths under prefix on every host.
type pathHandler struct {
	prefix string
	h      http.Handler
}

// HandlePath serves the paths under prefix with h on every host, before
// any virtual host's handler.
func (w *WebServer) HandlePath(prefix string, h http.Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.prefixes = append(w.prefixes, pathHandler{prefix, h})
}

// Conns returns copies of the connection logs, oldest first.
func (w *WebServer) Conns() []ConnLog {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]ConnLog, len(w.conns))
	for i, c := range w.conns {
		out[i] = *c
	}
	return out
}

// Requests returns the request logs, oldest first.
func (w *WebServer) Requests() []RequestLog {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]RequestLog(nil), w.requests...)
}

type connKey struct{}

// ServeHTTP dispatches by virtual host and logs the request.
func (w *WebServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	w.mu.Lock()
	h, ok := w.hosts[strings.ToLower(host)]
	for _, p := range w.prefixes {
		if strings.HasPrefix(r.URL.Path, p.prefix) {
			h, ok = p.h, true
			break
		}
	}
	w.mu.Unlock()
	if !ok {
		h = http.HandlerFunc(serveDefault)
	}
	cw := &countingWriter{ResponseWriter: rw, status: http.StatusOK}
	h.ServeHTTP(cw, r)
	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	rl := RequestLog{Host: r.Host, Method: r.Method, URI: r.RequestURI, Remote: remote, Proto: r.Proto,
		Range: r.Header.Get("Range"), Via: r.Header.Get("Via"), Status: cw.status, Bytes: cw.n}
	w.mu.Lock()
	if c, ok := r.Context().Value(connKey{}).(*ConnLog); ok {
		rl.Local = c.Local
		if c.Requests == 0 {
			c.Proto = r.Proto
		}
		c.Requests++
	}
	w.requests = append(w.requests, rl)
	w.mu.Unlock()
}

type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

var objectTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// serveDefault serves a host without a handler of its own: pages
// (/page/…, see servePage) and objects (/obj…, see serveObject).
func serveDefault(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/page/") {
		servePage(w, r)
		return
	}
	serveObject(w, r)
}

// servePage serves /page/NxSIZE: an HTML page whose N images are objects
// of SIZE bytes (/obj/SIZE?o=I) on the same host, for a browser to find
// as it parses the page.
func servePage(w http.ResponseWriter, r *http.Request) {
	var n, size int64
	if _, err := fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/page/"), "%dx%d", &n, &size); err != nil || n < 0 || n > 1000 || size < 0 {
		http.Error(w, "want /page/NxSIZE", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><title>%dx%d</title></head><body>\n", n, size)
	for i := range n {
		fmt.Fprintf(w, "<img src=\"/obj/%d?o=%d\" alt=\"\">\n", size, i)
	}
	fmt.Fprint(w, "</body></html>\n")
}

// serveObject serves /obj?size=N or /obj/N (and ?delay=DURATION).
func serveObject(w http.ResponseWriter, r *http.Request) {
	sizeText := r.URL.Query().Get("size")
	if rest, ok := strings.CutPrefix(r.URL.Path, "/obj/"); ok {
		sizeText = rest
	} else if r.URL.Path != "/obj" {
		http.NotFound(w, r)
		return
	}
	size, err := strconv.ParseInt(sizeText, 10, 64)
	if err != nil || size < 0 {
		http.Error(w, "want /obj?size=BYTES", http.StatusBadRequest)
		return
	}
	if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
		// ?delay=D answers after D: a request in flight that a test can
		// cut off before any of the response.
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if r.URL.Query().Has("dynamic") {
		// As a generated response: no validator, no ranges, so a client
		// cannot ask for the rest of it, only for all of it again.
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		io.Copy(w, NewObject(size))
		return
	}
	w.Header().Set("ETag", `"obj-`+strconv.FormatInt(size, 10)+`"`)
	http.ServeContent(w, r, "", objectTime, NewObject(size))
}

// StartWeb starts the web server in the server namespace.
func (tb *Testbed) StartWeb(opts WebOptions) (*WebServer, error) {
	ca, err := NewCA(tb.Hosts...)
	if err != nil {
		return nil, err
	}
	hosts := opts.Hosts
	if hosts == nil {
		hosts = tb.Hosts
	}
	w := &WebServer{CA: ca, tb: tb, hosts: map[string]http.Handler{}}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	var handler http.Handler = w
	if opts.AdvertiseHTTP3 {
		handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Alt-Svc", `h3=":443"; ma=3600`)
			w.ServeHTTP(rw, r)
		})
	}
	newServer := func(overTLS bool) func(net.Listener) (*http.Server, <-chan struct{}) {
		return func(l net.Listener) (*http.Server, <-chan struct{}) {
			srv := &http.Server{
				Handler:     handler,
				Protocols:   &protocols,
				IdleTimeout: opts.IdleTimeout,
				TLSConfig:   &tls.Config{Certificates: []tls.Certificate{ca.Cert}},
				ErrorLog:    log.New(quietHandshakes{}, "", log.LstdFlags),
				ConnContext: func(ctx context.Context, c net.Conn) context.Context {
					remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
					local, _ := netip.ParseAddrPort(c.LocalAddr().String())
					_, isTLS := c.(*tls.Conn)
					return w.logConn(ctx, &ConnLog{Remote: remote, Local: local, TLS: isTLS})
				},
			}
			return srv, serve(srv, l, overTLS)
		}
	}
	for _, h := range hosts {
		for _, port := range []string{"80", "443"} {
			w.listeners = append(w.listeners, webListener{addr: net.JoinHostPort(h.String(), port), serve: newServer(port == "443")})
		}
	}
	if opts.HTTP3 {
		w.hosts3 = hosts
	}
	w.listen.SetMultipathTCP(!opts.NoMPTCP)
	w.runMu.Lock()
	err = w.start()
	w.runMu.Unlock()
	tb.OnClose(func() error {
		w.runMu.Lock()
		defer w.runMu.Unlock()
		w.stop(false)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// logConn logs a new connection and hands it to the OnConn hooks.
func (w *WebServer) logConn(ctx context.Context, cl *ConnLog) context.Context {
	w.mu.Lock()
	w.conns = append(w.conns, cl)
	hooks := w.onConn
	w.mu.Unlock()
	for _, f := range hooks {
		f(*cl)
	}
	return context.WithValue(ctx, connKey{}, cl)
}

// start listens on every address and serves it; runMu held.
func (w *WebServer) start() error {
	for _, wl := range w.listeners {
		var l net.Listener
		err := w.tb.Server.Do(func() error {
			var err error
			l, err = w.listen.Listen(context.Background(), "tcp", wl.addr)
			return err
		})
		if err != nil {
			return err
		}
		srv, served := wl.serve(l)
		w.running = append(w.running, stopper(srv, served, nil))
	}
	for _, h := range w.hosts3 {
		if err := w.serveHTTP3(h); err != nil {
			return err
		}
	}
	return nil
}

// stop stops every server, gracefully first if asked; runMu held.
func (w *WebServer) stop(graceful bool) {
	var wg sync.WaitGroup
	for _, f := range w.running {
		wg.Go(func() { f(graceful) })
	}
	wg.Wait()
	w.running = nil
}

// restartGrace bounds a graceful restart's wait for the requests in
// flight.
const restartGrace = 2 * time.Second

// Restart stops the web server and starts it again on the same addresses,
// as a server deployment does: gracefully (HTTP/2 and HTTP/3 connections
// get a GOAWAY and their requests in flight up to two seconds to finish,
// idle HTTP/1.1 connections are closed) or not (every connection closed at
// once, mid-response). Meanwhile new connections are refused.
func (w *WebServer) Restart(graceful bool) error {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	w.stop(graceful)
	return w.start()
}

// quietHandshakes writes the server's error log to stderr, but for failed
// TLS handshakes: clients measure a path's RTT (and probe whether it
// answers) with a bare TCP handshake, and links that tests cut, reset or
// blackhole end handshakes half-way; the client side says what it saw.
type quietHandshakes struct{}

func (quietHandshakes) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) {
		return len(p), nil
	}
	return os.Stderr.Write(p)
}

// serveHTTP3 serves w with HTTP/3 on UDP port 443 of host h; runMu held.
func (w *WebServer) serveHTTP3(h netip.Addr) error {
	var pc net.PacketConn
	err := w.tb.Server.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", net.JoinHostPort(h.String(), "443"))
		return err
	})
	if err != nil {
		return err
	}
	srv := &http3.Server{
		Handler:   w,
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{w.CA.Cert}}),
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			local, _ := netip.ParseAddrPort(c.LocalAddr().String())
			return w.logConn(ctx, &ConnLog{Remote: remote, Local: local, TLS: true})
		},
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(pc)
	}()
	w.running = append(w.running, stopper(srv, served, func() { pc.Close() }))
	return nil
}
