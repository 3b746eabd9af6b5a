package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
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
	var httpL, tlsL, socksL listenFlag
	fs.Var(&httpL, "listen", "serve HTTP proxy clients on `ADDR[=INTENTS]`, the intents given to all they send (repeatable; default 127.0.0.1:8080)")
	fs.Var(&tlsL, "tls-listen", "serve HTTPS proxy clients (HTTP/2 or HTTP/1.1) on `ADDR[=INTENTS]` (repeatable); prints how to start a browser through it")
	certFile := fs.String("cert", "", "the HTTPS listeners' certificate chain, a PEM `FILE` (default: the proxy's own, see -cert-dir)")
	keyFile := fs.String("key", "", "the HTTPS listeners' private key, a PEM `FILE`")
	certDir := fs.String("cert-dir", defaultCertDir(), "keep the proxy's own authority and certificate, made on first use, in `DIR`")
	fs.Var(&socksL, "socks", "serve SOCKS5 clients on `ADDR[=INTENTS]` (repeatable)")
	rulesFile := fs.String("rules", "", "intents by destination: a file of `PATTERN INTENTS` lines (see proxy.ParseRules)")
	pname := fs.String("policy", "eaf", "policy: "+policyNames())
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics, to loopback clients only")
	allow := fs.String("allow", "", "client networks served, `CIDR,...` (default: loopback only)")
	auth := fs.String("auth", "", "ask clients for `USER:PASSWORD` (Basic proxy auth, SOCKS5 username/password)")
	ports := fs.String("ports", "", "ports requests and tunnels may reach, `PORT,...` or any (default 80,443,8080)")
	tunnelIdle := fs.Duration("tunnel-idle", proxy.DefaultTunnelIdleTimeout, "close a tunnel quiet both ways for `DURATION` (0: never)")
	allowLocal := fs.Bool("allow-local", false, "let clients reach this host itself: its loopback and interface addresses, localhost")
	var pac pacFlag
	fs.Var(&pac, "pac", "in the PAC file served at /proxy.pac, send `PATTERN=ADDR` (a rules pattern) to the listener at ADDR (repeatable)")
	verbose := fs.Bool("v", false, "log each request's decision and each tunnel")
	knowledge := knowledgeFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{"proxy takes no arguments"}
	}
	if len(httpL) == 0 && len(tlsL) == 0 && len(socksL) == 0 {
		httpL = listenFlag{{addr: "127.0.0.1:8080"}}
	}
	var tlsConf *tls.Config
	var own *proxy.OwnCertificate
	if len(tlsL) == 0 && (*certFile != "" || *keyFile != "") {
		return usageError{"-cert and -key go with -tls-listen"}
	}
	if len(tlsL) > 0 {
		var err error
		if tlsConf, own, err = proxyTLS(*certFile, *keyFile, *certDir, tlsL); err != nil {
			return err
		}
	}
	mk, ok := policies[*pname]
	if !ok {
		return usageError{fmt.Sprintf("unknown policy %q (have %s)", *pname, policyNames())}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	s := &proxy.Server{Logger: logger, PAC: pac}
	if *rulesFile != "" {
		f, err := os.Open(*rulesFile)
		if err != nil {
			return err
		}
		s.Rules, err = proxy.ParseRules(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	if *allow != "" {
		for p := range strings.SplitSeq(*allow, ",") {
			prefix, err := netip.ParsePrefix(strings.TrimSpace(p))
			if err != nil {
				return usageError{"-allow: " + err.Error()}
			}
			s.Allow = append(s.Allow, prefix.Masked())
		}
	}
	if *auth != "" {
		user, pass, ok := strings.Cut(*auth, ":")
		if !ok || user == "" || pass == "" {
			return usageError{"-auth wants USER:PASSWORD, both non-empty"}
		}
		s.User, s.Password = user, pass
	}
	s.AllowLocal = *allowLocal
	s.TunnelIdleTimeout = *tunnelIdle
	if *tunnelIdle <= 0 {
		s.TunnelIdleTimeout = -1 // never
	}
	if *ports == "any" {
		s.AnyPort = true
	} else if *ports != "" {
		for p := range strings.SplitSeq(*ports, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
			if err != nil || n == 0 {
				return usageError{fmt.Sprintf("-ports: bad port %q", p)}
			}
			s.Ports = append(s.Ports, uint16(n))
		}
	}

	cfg := intents.Config{Policy: mk(), Knowledge: *knowledge}
	if *verbose {
		cfg.Logger = logger // each decision, at debug level
	}
	m, err := mf(cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	// A browser's limits: over HTTP/2 a browser hands the proxy a whole
	// page at once, and a connection for each request loses more to
	// their slow starts' contention than it gains.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = intents.DefaultMaxConnsPerHost
	// One Dialer for requests and tunnels, whose sockets the Server's
	// Control keeps off this host.
	s.Dialer = &intents.Dialer{Manager: m, Control: s.Control}
	s.Transport = &intents.Transport{Manager: m, Base: base, Dialer: s.Dialer,
		MaxConnsPerHost: intents.DefaultMaxConnsPerHost, MaxConns: intents.DefaultMaxConns}
	defer s.Transport.CloseIdleConnections()

	var lc net.ListenConfig
	errs := make(chan error, len(httpL)+len(tlsL)+len(socksL)+1)
	var wg sync.WaitGroup
	serve := func(addr string, f func(net.Listener) error) (net.Addr, error) {
		l, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		logger.Info("proxy: listening", "addr", l.Addr().String())
		wg.Go(func() { errs <- f(l) })
		return l.Addr(), nil
	}
	var started error
	for _, l := range httpL {
		if _, started = serve(l.addr, func(ln net.Listener) error { return s.Serve(ln, l.in) }); started != nil {
			break
		}
	}
	for _, l := range tlsL {
		if started != nil {
			break
		}
		var at net.Addr
		if at, started = serve(l.addr, func(ln net.Listener) error { return s.ServeTLS(ln, tlsConf, l.in) }); started == nil && own != nil {
			printBrowserSetup(stderr, at.String(), own, filepath.Join(*certDir, "chromium"))
		}
	}
	for _, l := range socksL {
		if started != nil {
			break
		}
		_, started = serve(l.addr, func(ln net.Listener) error { return s.ServeSOCKS(ln, l.in) })
	}
	if *metricsAddr != "" && started == nil {
		_, started = serve(*metricsAddr, s.ServeMetrics)
	}
	if started == nil {
		select {
		case <-ctx.Done():
		case started = <-errs:
		}
	}
	s.Close()
	wg.Wait()
	if errors.Is(started, proxy.ErrServerClosed) {
		started = nil
	}
	return started
}
