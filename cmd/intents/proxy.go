package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/proxy"
)

// listenFlag is a repeatable -listen or -socks: ADDR or ADDR=INTENTS.
type listenFlag []listenSpec

type listenSpec struct {
	addr string
	in   intents.Intents
}

func (f *listenFlag) String() string {
	var parts []string
	for _, l := range *f {
		parts = append(parts, l.addr)
	}
	return strings.Join(parts, ",")
}

func (f *listenFlag) Set(v string) error {
	addr, text, _ := strings.Cut(v, "=")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%q: want HOST:PORT[=INTENTS]", v)
	}
	in, err := intents.ParseIntents(text)
	if err != nil {
		return err
	}
	*f = append(*f, listenSpec{addr, in})
	return nil
}

// pacFlag is a repeatable -pac: PATTERN=ADDR.
type pacFlag []proxy.PACRoute

func (f *pacFlag) String() string { return fmt.Sprint(len(*f), " routes") }

func (f *pacFlag) Set(v string) error {
	pat, addr, ok := strings.Cut(v, "=")
	if _, _, err := net.SplitHostPort(addr); !ok || err != nil {
		return fmt.Errorf("%q: want PATTERN=HOST:PORT", v)
	}
	rules, err := proxy.ParseRules(strings.NewReader(pat))
	if err != nil || len(rules) != 1 {
		return fmt.Errorf("%q: bad pattern", pat)
	}
	*f = append(*f, proxy.PACRoute{Host: rules[0].Host, Prefix: rules[0].Prefix, Proxy: addr})
	return nil
}

// cmdProxy runs the proxy until ctx ends: HTTP on every -listen, HTTPS on
// every -tls-listen, SOCKS5 on every -socks, the metrics on -metrics.
func cmdProxy(ctx context.Context, args []string, stderr io.Writer, mf managerFunc) error {
	fs := newFlags("proxy")
	var httpL, tlsL, socksL, transparentL listenFlag
	fs.Var(&httpL, "listen", "serve HTTP proxy clients on `ADDR[=INTENTS]`, the intents given to all they send (repeatable; default 127.0.0.1:8080)")
	fs.Var(&tlsL, "tls-listen", "serve HTTPS proxy clients (HTTP/2 or HTTP/1.1) on `ADDR[=INTENTS]` (repeatable); prints how to start a browser through it")
	certFile := fs.String("cert", "", "the HTTPS listeners' certificate chain, a PEM `FILE` (default: the proxy's own, see -cert-dir)")
	keyFile := fs.String("key", "", "the HTTPS listeners' private key, a PEM `FILE`")
	certDir := fs.String("cert-dir", defaultCertDir(), "keep the proxy's own authority and certificate, made on first use, in `DIR`")
	fs.Var(&socksL, "socks", "serve SOCKS5 clients on `ADDR[=INTENTS]` (repeatable)")
	fs.Var(&transparentL, "transparent", "serve connections a packet filter redirected to `ADDR[=INTENTS]`, each to its original destination (Linux; repeatable)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics, to loopback clients only")
	allow := fs.String("allow", "", "client networks served, `CIDR,...` (default: loopback only)")
	auth := fs.String("auth", "", "ask clients for `USER:PASSWORD` (Basic proxy auth, SOCKS5 username/password)")
	tunnelIdle := fs.Duration("tunnel-idle", proxy.DefaultTunnelIdleTimeout, "close a tunnel quiet both ways for `DURATION` (0: never)")
	var pac pacFlag
	fs.Var(&pac, "pac", "in the PAC file served at /proxy.pac, send `PATTERN=ADDR` (a rules pattern) to the listener at ADDR (repeatable)")
	sf := addServerFlags(fs, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{"proxy takes no arguments"}
	}
	if len(httpL) == 0 && len(tlsL) == 0 && len(socksL) == 0 && len(transparentL) == 0 {
		httpL = listenFlag{{addr: "127.0.0.1:8080"}}
	}
	if len(tlsL) == 0 && (*certFile != "" || *keyFile != "") {
		return usageError{"-cert and -key go with -tls-listen"}
	}
	var tlsConf *tls.Config
	var own *proxy.OwnCertificate
	if len(tlsL) > 0 {
		var err error
		if tlsConf, own, err = proxyTLS(*certFile, *keyFile, *certDir, tlsL); err != nil {
			return err
		}
	}
	allowed, err := parseAllow(*allow)
	if err != nil {
		return err
	}
	user, pass, hasAuth := strings.Cut(*auth, ":")
	if *auth != "" && (!hasAuth || user == "" || pass == "") {
		return usageError{"-auth wants USER:PASSWORD, both non-empty"}
	}
	s, closeServer, err := sf.server(stderr, mf)
	if err != nil {
		return err
	}
	defer closeServer()
	s.PAC, s.Allow, s.User, s.Password = pac, allowed, user, pass
	s.TunnelIdleTimeout = *tunnelIdle
	if *tunnelIdle <= 0 {
		s.TunnelIdleTimeout = -1 // never
	}
	g := newServing(ctx, s)
	started := g.startListeners(proxyListeners{httpL, tlsL, socksL, transparentL}, tlsConf, func(at net.Addr) {
		if own != nil {
			printBrowserSetup(stderr, at.String(), own, filepath.Join(*certDir, "chromium"))
		}
	})
	if *metricsAddr != "" && started == nil {
		_, started = g.listen(*metricsAddr, s.ServeMetrics)
	}
	if started == nil {
		started = g.wait(ctx.Done())
	}
	return g.close(started)
}

// proxyListeners are the listeners asked for, by kind.
type proxyListeners struct{ http, tls, socks, transparent listenFlag }

// startListeners starts every listener of ls, in that order, until one
// fails to start (its error); tlsStarted is told each HTTPS listener's
// address.
func (g *serving) startListeners(ls proxyListeners, tlsConf *tls.Config, tlsStarted func(net.Addr)) error {
	s := g.s
	for _, l := range ls.http {
		if _, err := g.listen(l.addr, func(ln net.Listener) error { return s.Serve(ln, l.in) }); err != nil {
			return err
		}
	}
	for _, l := range ls.tls {
		at, err := g.listen(l.addr, func(ln net.Listener) error { return s.ServeTLS(ln, tlsConf, l.in) })
		if err != nil {
			return err
		}
		tlsStarted(at)
	}
	for _, l := range ls.socks {
		if _, err := g.listen(l.addr, func(ln net.Listener) error { return s.ServeSOCKS(ln, l.in) }); err != nil {
			return err
		}
	}
	for _, l := range ls.transparent {
		if _, err := g.listen(l.addr, func(ln net.Listener) error { return s.ServeTransparent(ln, l.in) }); err != nil {
			return err
		}
	}
	return nil
}

// serving runs a Server's listeners, each in a goroutine of its own.
type serving struct {
	ctx  context.Context
	s    *proxy.Server
	lc   net.ListenConfig
	errs chan error
	wg   sync.WaitGroup
}

func newServing(ctx context.Context, s *proxy.Server) *serving {
	return &serving{ctx: ctx, s: s, errs: make(chan error, 16)}
}

// listen listens on addr, logs the address and serves it with f.
func (g *serving) listen(addr string, f func(net.Listener) error) (net.Addr, error) {
	l, err := g.lc.Listen(g.ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	g.s.Logger.Info("proxy: listening", "addr", l.Addr().String())
	g.wg.Go(func() {
		select {
		case g.errs <- f(l):
		default: // another listener's error ended the Server already
		}
	})
	return l.Addr(), nil
}

// wait waits until done is closed or a listener fails, and returns the
// failure.
func (g *serving) wait(done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case err := <-g.errs:
		return err
	}
}

// close closes the Server, waits for its listeners and returns err, the
// reason it ended (nil for an orderly end).
func (g *serving) close(err error) error {
	g.s.Close()
	g.wg.Wait()
	if errors.Is(err, proxy.ErrServerClosed) {
		return nil
	}
	return err
}
