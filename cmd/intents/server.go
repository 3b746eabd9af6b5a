package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/proxy"
)

// serverFlags are the flags of a proxy Server that `proxy` and `run`
// share: what it decides with and what it may reach.
type serverFlags struct {
	rules, policy, ports, knowledge *string
	allowLocal, verbose             *bool
}

// addServerFlags registers the flags on fs; with reach, those that bound
// what clients may reach too (a proxy that serves one program has no
// need of them: the program could reach the same without it).
func addServerFlags(fs *flag.FlagSet, reach bool) *serverFlags {
	f := &serverFlags{
		rules:      fs.String("rules", "", "intents by destination: a file of `PATTERN INTENTS` lines (see proxy.ParseRules)"),
		policy:     fs.String("policy", "eaf", "policy: "+policyNames()),
		verbose:    fs.Bool("v", false, "log each request's decision and each tunnel"),
		knowledge:  knowledgeFlag(fs),
		ports:      new(string),
		allowLocal: new(bool),
	}
	if reach {
		f.ports = fs.String("ports", "", "ports requests and tunnels may reach, `PORT,...` or any (default 80,443,8080)")
		f.allowLocal = fs.Bool("allow-local", false, "let clients reach this host itself: its loopback and interface addresses, localhost")
	}
	return f
}

// server makes the Server the flags describe, with its Manager (from
// mf), Transport and Dialer, logging to stderr. close ends the Manager
// and the Transport's connections, after the Server is closed.
func (f *serverFlags) server(stderr io.Writer, mf managerFunc) (s *proxy.Server, close func(), err error) {
	mk, ok := policies[*f.policy]
	if !ok {
		return nil, nil, usageError{fmt.Sprintf("unknown policy %q (have %s)", *f.policy, policyNames())}
	}
	level := slog.LevelInfo
	if *f.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	s = &proxy.Server{Logger: logger, AllowLocal: *f.allowLocal}
	if s.Rules, err = readRules(*f.rules); err != nil {
		return nil, nil, err
	}
	if s.Ports, s.AnyPort, err = parsePorts(*f.ports); err != nil {
		return nil, nil, err
	}
	cfg := intents.Config{Policy: mk(), Knowledge: *f.knowledge}
	if *f.verbose {
		cfg.Logger = logger // each decision, at debug level
	}
	m, err := mf(cfg)
	if err != nil {
		return nil, nil, err
	}
	// A browser's limit per host: over HTTP/2 a browser hands the proxy a
	// whole page at once, and a connection for each request loses more
	// to their slow starts' contention than it gains. Not its limit in
	// all: the host's programs share one pool, and a request that hangs
	// at one origin must hold none to another.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = intents.DefaultMaxConnsPerHost
	// An origin's response headers take at most 64 kB (squid's bound),
	// not net/http's 10 MB: the proxy holds those of every client's
	// requests at once.
	base.MaxResponseHeaderBytes = maxResponseHeaderBytes
	// One Dialer for requests and tunnels, whose sockets the Server's
	// Control keeps off this host.
	s.Dialer = &intents.Dialer{Manager: m, Control: s.Control}
	s.Transport = &intents.Transport{Manager: m, Base: base, Dialer: s.Dialer, MaxConnsPerHost: intents.DefaultMaxConnsPerHost}
	return s, func() {
		s.Transport.CloseIdleConnections()
		m.Close()
	}, nil
}

// maxResponseHeaderBytes bounds an origin's response headers through the
// proxy.
const maxResponseHeaderBytes = 64 << 10

// readRules reads the rules file name ("": none).
func readRules(name string) ([]proxy.Rule, error) {
	if name == "" {
		return nil, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return proxy.ParseRules(f)
}

// parsePorts reads -ports: "PORT,...", "any", or "" for the default.
func parsePorts(text string) (ports []uint16, any bool, err error) {
	if text == "any" || text == "" {
		return nil, text == "any", nil
	}
	for p := range strings.SplitSeq(text, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil || n == 0 {
			return nil, false, usageError{fmt.Sprintf("-ports: bad port %q", p)}
		}
		ports = append(ports, uint16(n))
	}
	return ports, false, nil
}

// parseAllow reads -allow: "CIDR,...", or "" for loopback only.
func parseAllow(text string) ([]netip.Prefix, error) {
	var allow []netip.Prefix
	if text == "" {
		return nil, nil
	}
	for p := range strings.SplitSeq(text, ",") {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(p))
		if err != nil {
			return nil, usageError{"-allow: " + err.Error()}
		}
		allow = append(allow, prefix.Masked())
	}
	return allow, nil
}
