//go:build linux

package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/h3"
	"github.com/sockintents/intents/internal/pageload"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
	"github.com/sockintents/intents/proxy"
)

// The contenders, by key: the two single-path baselines first. Every
// intents contender is what a program gets that swaps in the Transport
// with a Manager over both paths (and the browsers' connection limits,
// which every contender has): a fresh Manager and Transport for each load,
// no size hints, unless its name says otherwise.
var (
	contenderNames = map[string]string{
		"path1": "path 1 (net/http)",
		"path2": "path 2 (net/http)",
		"rr":    "round robin (intents)",
		// The headline: a first visit, nothing known, nothing hinted.
		"eaf": "EAF (intents)",
		// Variants that need the caller's help, or an earlier visit.
		"eaf-hints": "EAF, size hints (intents)",
		"eaf-warm":  "EAF, warm Manager (intents)",
		// A new Manager and Transport for each load, as "eaf", but from
		// what the one before learnt of the paths and saved
		// (Config.Knowledge): a program started again.
		"eaf-restart": "EAF, restarted with knowledge (intents)",
		"eaf-twostep": "EAF, two-step 8 KiB (intents)",
		// "eaf" with its first request placed by the policy alone, not
		// raced over both paths (Transport.DisableFirstRace).
		"eaf-norace": "EAF, first request not raced (intents)",
		"eaf-priors": "EAF, priors (intents)",
		// Everything a scheduler could know (sizes and the paths' true
		// rates and RTTs): what stays between it and the bound is not for
		// want of information.
		"eaf-oracle": "EAF, hints and priors (intents)",
		// A reference: the host's connections split between the paths
		// (half each, or -split), each request placed on one knowing
		// the sizes and the paths (staticSplit).
		"split":     "static split, told all (net/http)",
		"mptcp":     "MPTCP, 1st subflow p1 (net/http)",
		"eaf-mptcp": "EAF+MPTCP (intents)",
		// The intents pool on path 1 only: the pool against net/http on
		// the same path, without any path choice.
		"path1-intents": "path 1 (intents)",
		// HTTP/3 (HTTPS, over QUIC): quic-go's own Transport on one path,
		// and ours with EAF over both.
		"h3-path1": "path 1 (quic-go HTTP/3)",
		"h3-path2": "path 2 (quic-go HTTP/3)",
		"eaf-h3":   "EAF, HTTP/3 (intents)",
		// net/http through the proxy (a new one, on loopback, each load),
		// which places the requests: on one path by its listener's
		// intents, or by EAF.
		"proxy-path1": "path 1 (via the proxy)",
		"proxy-path2": "path 2 (via the proxy)",
		"proxy-eaf":   "EAF (via the proxy)",
		// Headless Chromium through the proxy (a new browser, profile and
		// proxy each load), loading the pages as HTML (see pageload.Site)
		// over plain HTTP, where the proxy places each request, or over
		// HTTPS (HTTP/2 where the browser may), where it places each
		// tunnel, with its listener's intents as above.
		"browser-path1": "path 1 (Chromium via the proxy)",
		"browser-path2": "path 2 (Chromium via the proxy)",
		// Path 1 again: a copy of a baseline, measured as a contender of
		// its own, which every rule must pass.
		"browser-twin": "path 1 again (Chromium, a twin)",
		"browser-rr":   "round robin (Chromium via the proxy)",
		"browser-eaf":  "EAF (Chromium via the proxy)",
		// A proxy that keeps running between loads (its Manager's
		// estimates from the loads before), where the others start anew.
		"browser-eaf-warm": "EAF, a running proxy (Chromium via the proxy)",
		// A new proxy each load, started from what the one before saved
		// (Config.Knowledge): a proxy restarted between pages.
		"browser-eaf-restart": "EAF, a restarted proxy (Chromium via the proxy)",
		// The same over HTTP/2 between Chromium and the proxy (an HTTPS
		// proxy): all of a page's requests reach the proxy at once.
		"browser-h2-path1":  "path 1 (Chromium via the proxy, HTTP/2)",
		"browser-h2-path2":  "path 2 (Chromium via the proxy, HTTP/2)",
		"browser-h2-rr":     "round robin (Chromium via the proxy, HTTP/2)",
		"browser-h2-eaf":    "EAF (Chromium via the proxy, HTTP/2)",
		"browser-tls-path1": "path 1 (Chromium, HTTPS tunnels)",
		"browser-tls-path2": "path 2 (Chromium, HTTPS tunnels)",
		"browser-tls-eaf":   "EAF (Chromium, HTTPS tunnels)",
		"browser-tls-mptcp": "EAF, MPTCP tunnels (Chromium, HTTPS)",
	}
	defaultContenders = []string{"path1", "path2", "rr", "eaf", "eaf-hints", "eaf-mptcp", "mptcp"}
	baselines         = []string{"path1", "path2"}
	// browserContenders are -browser's: Chromium's contenders, a twin of
	// its path 1 (the rules' own noise), and the Go client's on the same
	// cells.
	browserContenders = []string{"path1", "path2", "eaf", "browser-path1", "browser-path2", "browser-twin", "browser-rr", "browser-eaf",
		"browser-h2-path1", "browser-h2-path2", "browser-h2-eaf",
		"browser-tls-path1", "browser-tls-path2", "browser-tls-eaf", "browser-tls-mptcp"}
)

// browserKinds say how each browser contender's proxy is set: the path
// its listener requires (none: its policy, EAF or round robin, decides),
// whether the pages come over HTTPS, and whether its tunnels are MPTCP.
var browserKinds = map[string]struct {
	require                  string
	roundRobin, https, mptcp bool
	// h2Proxy: the browser reaches the proxy over HTTPS, with HTTP/2, and
	// so sends it all of a page's requests at once.
	h2Proxy bool
	// warm: one proxy serves every load, after a load of its own;
	// restart: a new one each load, from what the one before saved.
	warm, restart bool
}{
	"browser-path1":       {require: "p1"},
	"browser-path2":       {require: "p2"},
	"browser-twin":        {require: "p1"},
	"browser-rr":          {roundRobin: true},
	"browser-eaf":         {},
	"browser-eaf-warm":    {warm: true},
	"browser-eaf-restart": {restart: true},
	"browser-h2-path1":    {require: "p1", h2Proxy: true},
	"browser-h2-path2":    {require: "p2", h2Proxy: true},
	"browser-h2-rr":       {roundRobin: true, h2Proxy: true},
	"browser-h2-eaf":      {h2Proxy: true},
	"browser-tls-path1":   {require: "p1", https: true},
	"browser-tls-path2":   {require: "p2", https: true},
	"browser-tls-eaf":     {https: true},
	"browser-tls-mptcp":   {https: true, mptcp: true},
}

// singlesOf are the single paths contender c is set against: a
// browser's over the same protocol for a browser contender, net/http's
// for the others.
func singlesOf(c string) []string {
	switch {
	case strings.HasPrefix(c, "browser-tls-"):
		return []string{"browser-tls-path1", "browser-tls-path2"}
	case strings.HasPrefix(c, "browser-h2-"):
		return []string{"browser-h2-path1", "browser-h2-path2"}
	case isBrowser(c):
		return []string{"browser-path1", "browser-path2"}
	}
	return baselines
}

func contenderKeys() []string {
	keys := make([]string, 0, len(contenderNames))
	for k := range contenderNames {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// contender is one way of loading pages.
type contender struct {
	key string
	rt  http.RoundTripper
	m   *intents.Manager // of an intents contender
	// fresh builds the contender anew for each load (an intents one: a new
	// Manager and Transport, which know nothing of the paths or sizes).
	fresh bool
	hints bool // each object's size is attached as an intent
	// prime: an unmeasured load comes first, which a warm contender
	// keeps its Manager and Transport from, and a restarted one the
	// knowledge its Manager saved.
	prime bool
	// https: it loads the pages over HTTPS (the HTTP/3 contenders).
	https bool
	// pathHeader names the response header that tells an object's path
	// (a proxy's), if the client's connection does not.
	pathHeader string
	// browser, if set, loads the pages: Chromium through a proxy.
	browser *browser
	close   func() // ends what it opened, if set
}

// closeIdle ends the contender's idle connections, so every load starts
// from scratch (handshakes, slow start), as a page load in a new browser.
func (c contender) closeIdle() {
	if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func newContender(key string, cfg config) contender {
	perHost := cmp.Or(cfg.ConnsPerHost, pageload.MaxConnsPerHost)
	manager := func(p intents.Policy, priors bool) *intents.Manager {
		paths := []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}
		if priors {
			for i := range paths {
				paths[i].RTT, paths[i].Bandwidth = cfg.RTT[i], cfg.Rate[i]
			}
		}
		// Every path an MPTCP endpoint, so MPTCP connections get a subflow
		// on the other path (the client runs as root in its namespace).
		var logger *slog.Logger
		if cfg.Trace == key {
			logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		// No name servers: the pages name their hosts by address, and
		// nothing asked for by name (a browser's own background requests)
		// is looked up beyond the testbed.
		// A restarted contender keeps its knowledge in a file of its own.
		var knowledge string
		if strings.HasSuffix(key, "-restart") {
			knowledge = filepath.Join(cfg.KnowledgeDir, key+".json")
		}
		m, err := intents.NewManager(intents.Config{Paths: paths, Policy: p, NoWatch: true, MPTCPEndpoints: true, Logger: logger,
			ResolvConf: os.DevNull, Knowledge: knowledge})
		if err != nil {
			log.Fatal(err)
		}
		if err := m.MPTCPError(); err != nil {
			log.Fatal(err)
		}
		return m
	}
	withPolicy := func(p intents.Policy, priors bool) contender {
		m := manager(p, priors)
		// The browsers' limits, as the page loader's other contenders have
		// them; a browser keeps its idle connections too.
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = perHost
		tr := &intents.Transport{Manager: m, MaxConnsPerHost: perHost, MaxConns: pageload.MaxConns, Base: base}
		return contender{key: key, rt: tr, m: m, fresh: true}
	}
	switch key {
	case "path1":
		return contender{key: key, rt: boundTransport("p1", perHost)}
	case "path2":
		return contender{key: key, rt: boundTransport("p2", perHost)}
	case "rr":
		return withPolicy(&policy.RoundRobin{}, false)
	case "eaf":
		return withPolicy(&policy.EAF{}, false)
	case "eaf-hints":
		c := withPolicy(&policy.EAF{}, false)
		c.hints = true
		return c
	case "eaf-warm":
		c := withPolicy(&policy.EAF{}, false)
		c.fresh, c.prime = false, true
		return c
	case "eaf-norace":
		c := withPolicy(&policy.EAF{}, false)
		c.rt.(*intents.Transport).DisableFirstRace = true
		return c
	case "eaf-twostep":
		c := withPolicy(&policy.EAF{}, false)
		c.rt.(*intents.Transport).TwoStep = 8 << 10
		return c
	case "eaf-restart":
		c := withPolicy(&policy.EAF{}, false)
		c.prime = true
		return c
	case "eaf-priors":
		return withPolicy(&policy.EAF{}, true)
	case "eaf-oracle":
		c := withPolicy(&policy.EAF{}, true)
		c.hints = true
		return c
	case "split":
		return contender{key: key, rt: newStaticSplit(cfg.SplitConns, perHost, cfg), hints: true}
	case "eaf-mptcp":
		return withPolicy(&policy.EAFMPTCP{}, false)
	case "path1-intents":
		return withPolicy(policy.Single("p1"), false)
	case "h3-path1", "h3-path2":
		return h3Contender(key, "p"+key[len(key)-1:], cfg.CA)
	case "eaf-h3":
		c := withPolicy(&policy.EAF{}, false)
		tr := c.rt.(*intents.Transport)
		tr.HTTP3, tr.HTTP3Always = &h3.Dialer{}, true
		tr.Base.TLSClientConfig = &tls.Config{RootCAs: caPool(cfg.CA)}
		c.https = true
		return c
	case "proxy-path1", "proxy-path2", "proxy-eaf":
		c := withPolicy(&policy.EAF{}, false)
		var in intents.Intents
		if key != "proxy-eaf" {
			in.Interfaces = map[string]intents.Level{"p" + key[len(key)-1:]: intents.LevelRequire}
		}
		return viaProxy(c, in, perHost)
	case "browser-path1", "browser-path2", "browser-twin", "browser-eaf", "browser-eaf-warm", "browser-eaf-restart", "browser-rr",
		"browser-h2-path1", "browser-h2-path2", "browser-h2-rr", "browser-h2-eaf",
		"browser-tls-path1", "browser-tls-path2", "browser-tls-eaf", "browser-tls-mptcp":
		kind := browserKinds[key]
		var p intents.Policy = &policy.EAF{}
		if kind.roundRobin {
			p = &policy.RoundRobin{}
		}
		c := withPolicy(p, false)
		var in intents.Intents
		if kind.require != "" {
			in.Interfaces = map[string]intents.Level{kind.require: intents.LevelRequire}
		}
		if kind.mptcp {
			in.Multipath = intents.MultipathAggregate
		}
		c.https = kind.https
		switch {
		case kind.warm:
			c.fresh, c.prime = false, true
		case kind.restart:
			c.prime = true
		}
		return viaBrowser(c, in, cfg, kind.h2Proxy)
	case "mptcp":
		// Plain net/http over MPTCP connections whose first subflow is on
		// path 1.
		d := &intents.Dialer{Manager: manager(nil, false)}
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx = intents.WithIntents(ctx, intents.Intents{Multipath: intents.MultipathAggregate,
				Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}})
			return d.DialContext(ctx, network, addr)
		}
		return contender{key: key, rt: &http.Transport{DialContext: dial, MaxConnsPerHost: perHost}}
	}
	panic("unknown contender " + key) // checked by main
}

// startProxy serves a proxy with c's Transport and Manager on addr
// (host:0), with intents in, to the clients of allow (nil: loopback),
// over TLS with tlsConf if set. It returns the proxy's address and how to
// stop it.
func startProxy(c contender, in intents.Intents, addr string, allow []netip.Prefix, tlsConf *tls.Config) (string, func()) {
	// One pool: the contender is its Transport, whoever the client.
	s := &proxy.Server{Transport: c.rt.(*intents.Transport), SharedPool: true, Dialer: &intents.Dialer{Manager: c.m}, PathHeader: "Intents-Path", Allow: allow}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		if tlsConf != nil {
			served <- s.ServeTLS(l, tlsConf, in)
			return
		}
		served <- s.Serve(l, in)
	}()
	return l.Addr().String(), func() {
		s.Close()
		<-served
	}
}

// viaProxy makes c's Transport the one of a proxy that serves, on a
// loopback listener with intents in, a net/http client with the browsers'
// limits: c then loads through the proxy.
func viaProxy(c contender, in intents.Intents, perHost int) contender {
	tr := c.rt.(*intents.Transport)
	addr, stop := startProxy(c, in, "127.0.0.1:0", nil, nil)
	client := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr}),
		MaxConnsPerHost: perHost, MaxIdleConnsPerHost: perHost}
	c.close = func() {
		stop()
		client.CloseIdleConnections()
		tr.Close()
	}
	c.rt, c.pathHeader = client, "Intents-Path"
	return c
}

// viaBrowser gives c's Transport and Manager to a proxy, with intents in,
// for a browser in the isolated namespace (cfg.Browser), whose only
// route leads to it. With h2 the proxy serves HTTPS (a certificate of its
// own, which the browser accepts by its key) and the browser speaks
// HTTP/2 to it.
func viaBrowser(c contender, in intents.Intents, cfg config, h2 bool) contender {
	iso := cfg.Browser
	b := &browser{Netns: iso.Netns, SPKI: iso.SPKI}
	var tlsConf *tls.Config
	scheme := "http"
	if h2 {
		cert, spki := proxyCert(iso.Gateway)
		tlsConf, scheme = &tls.Config{Certificates: []tls.Certificate{cert}}, "https"
		b.SPKI += "," + spki
	}
	addr, stop := startProxy(c, in, net.JoinHostPort(iso.Gateway.String(), "0"), []netip.Prefix{netip.PrefixFrom(iso.Addr, 32)}, tlsConf)
	b.Proxy = scheme + "://" + addr
	c.browser = b
	c.close = stop
	return c
}

// proxyCert is the certificate of the browsers' proxies, for gateway
// (the first call's: a page loader has one isolated namespace), and its
// key's hash (see browser.SPKI). Made once: each load's browser has a
// fresh profile that trusts no certificate anyway.
func proxyCert(gateway netip.Addr) (tls.Certificate, string) {
	proxyCertOnce.Do(func() {
		ca, err := testbed.NewCA(gateway)
		if err != nil {
			log.Fatal(err)
		}
		proxyCertSPKI, err = spkiHash(ca.Cert.Certificate[0])
		if err != nil {
			log.Fatal(err)
		}
		proxyCertPair = ca.Cert
	})
	return proxyCertPair, proxyCertSPKI
}

var (
	proxyCertOnce sync.Once
	proxyCertPair tls.Certificate
	proxyCertSPKI string
)

// client loads the pages with every contender, inside the client
// namespace, and writes a record per load to stdout. The reps go round the
// contenders, so a slow spell of this shared machine hits them alike.
func client() {
	var cfg config
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		log.Fatal(err)
	}
	warmPaths()
	dir, err := os.MkdirTemp("", "pageload-knowledge-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg.KnowledgeDir = dir
	var contenders []contender
	for _, k := range cfg.Contenders {
		contenders = append(contenders, newContender(k, cfg))
	}
	// renew gives a fresh contender its new Manager and Transport.
	renew := func(i int) {
		c := contenders[i]
		if !c.fresh {
			return
		}
		if c.close != nil {
			c.close()
		}
		if tr, ok := c.rt.(*intents.Transport); ok {
			tr.Close()
		}
		if c.m != nil {
			c.m.Close()
		}
		contenders[i] = newContender(c.key, cfg)
	}
	enc := json.NewEncoder(os.Stdout)
	emu := emulatorLink{asks: os.NewFile(3, "asks"), answers: bufio.NewReader(os.NewFile(4, "answers"))}
	// visit numbers the loads, so that every load asks for URLs of its
	// own: a contender that keeps its Transport (eaf-warm) knows the
	// paths from earlier loads, not each object's size.
	visit := 0
	site := &pageload.Site{Pages: cfg.Workloads, Host: serverHost}
	for wi, w := range cfg.Workloads {
		server := &testbed.Netns{Name: cfg.ServerNetns}
		load := func(c contender, tag string) (pageload.Result, testbed.TCPCounters, [3]int64, []estimateSample, error) {
			movedBefore := movesOf(c.rt)
			before, err := server.TCPCounters()
			if err != nil {
				log.Fatal(err)
			}
			l := &pageload.Loader{Transport: c.rt, SizeIntents: c.hints, PathOf: localDev, PathHeader: c.pathHeader,
				URL: func(host int, size int64, i int) string {
					scheme := "http"
					if c.https {
						scheme = "https"
					}
					return fmt.Sprintf("%s://%s/obj/%d?o=%d&v=%d", scheme, serverHost(host), size, i, visit)
				}}
			visit++
			ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
			start := time.Now()
			stopSampling := func() []estimateSample { return nil }
			if cfg.Traced && c.m != nil {
				stopSampling = sampleEstimates(c.m, c.rt, start)
			}
			var res pageload.Result
			if c.browser != nil {
				res, err = browserLoad(ctx, c, site, wi, tag)
			} else {
				res, err = l.Load(ctx, w)
			}
			cancel()
			estimates := stopSampling()
			if err != nil {
				// Counted apart, as net/http's loads on the same network
				// may all have completed.
				log.Printf("%s, %s, %s: load failed after %v: %v", cfg.Scenario, w.Name, contenderNames[c.key], time.Since(start).Round(time.Millisecond), err)
				res.PLT = time.Since(start)
			}
			after, cerr := server.TCPCounters() // not err: the load's, returned below
			if cerr != nil {
				log.Fatal(cerr)
			}
			c.closeIdle()
			tcp := after.Sub(before)
			moved := movesOf(c.rt)
			for i := range moved {
				moved[i] -= movedBefore[i]
			}
			if cfg.Trace == c.key {
				log.Printf("load: PLT %v; the server retransmitted %d segments, %d timeouts, %d tail loss probes; %d bodies resumed",
					res.PLT.Round(time.Millisecond), tcp.Retransmits, tcp.Timeouts, tcp.LossProbes, moved[2])
				for i, o := range res.Objects {
					log.Printf("object %d (%d B) on %s: %v to %v", i, o.Bytes, o.Path,
						o.Start.Round(time.Millisecond), o.End.Round(time.Millisecond))
				}
				for _, u := range pathUses(res, cfg.Rate) {
					log.Print("load: ", u)
				}
			}
			if cfg.Trace == c.key && c.m != nil {
				for _, p := range c.m.Paths() {
					e := p.Estimate()
					floor := ""
					if e.BandwidthFloor {
						floor = " (a floor: no transfer showed it)"
					}
					log.Printf("%s after the load: RTT %v, capacity %.2f Mbit/s%s, rate %.2f Mbit/s, loss %.3f",
						p.Name, e.RTT.Round(100*time.Microsecond), float64(e.Bandwidth)/1e6, floor, float64(e.Rate)/1e6, e.Loss)
				}
			}
			return res, tcp, moved, estimates, err
		}
		for _, c := range contenders {
			if c.prime {
				load(c, "") // the Manager's first look at the paths: not measured
			}
		}
		for rep := range cfg.Reps {
			for i := range contenders {
				if slices.Contains(cfg.LeftOut[w.Name], contenders[i].key) {
					continue
				}
				var (
					c         contender
					tag       string
					res       pageload.Result
					tcp       testbed.TCPCounters
					moved     [3]int64
					estimates []estimateSample
					err       error
				)
				var plt time.Duration
				ended := func() testbed.Lateness {
					l := emu.end()
					if cfg.Late.exceeded(l, plt) {
						log.Printf("%s, %s, %s, load %d: the emulators ran late (latest packet %v, mean %v; the bound %v, %v)",
							cfg.Scenario, w.Name, contenderNames[c.key], rep, l.Max, l.Mean(), cfg.Late.maxFor(plt), cfg.Late.Mean)
					}
					return l
				}
				late, redone := measureInTime(func(try int) time.Duration {
					renew(i)
					c = contenders[i]
					if c.browser != nil {
						tag = fmt.Sprintf("%s.%d.%d.%d", c.key, wi, rep, try)
					}
					emu.start(rep)
					res, tcp, moved, estimates, err = load(c, tag)
					plt = res.PLT
					return plt
				}, ended, cfg.Late)
				rec := record{Scenario: cfg.Scenario, Workload: w.Name, Contender: c.key, Rep: rep,
					PLT: res.PLT, Bytes: res.Bytes, Paths: res.PathCounts(),
					Retransmits: tcp.Retransmits, Timeouts: tcp.Timeouts, Moved: moved[0], Split: moved[1], Resumed: moved[2], Estimates: estimates,
					Load: tag, LateMax: late.Max, LateMean: late.Mean(), Redone: redone, KeptLate: cfg.Late.exceeded(late, res.PLT)}
				if err != nil {
					rec.Failed = err.Error()
				}
				if err := enc.Encode(rec); err != nil {
					log.Fatal(err)
				}
			}
		}
	}
}

// serverHost is the address of the testbed's server host h.
func serverHost(h int) string { return fmt.Sprintf("10.71.100.%d", h+1) }

// browserLoad loads page p of site in c's browser, tagged tag: its PLT by
// the browser's clock. Its paths are in the servers' log (see
// browserLoads). A load fails unless the browser received every object,
// each byte of it, before its load event.
func browserLoad(ctx context.Context, c contender, site *pageload.Site, p int, tag string) (pageload.Result, error) {
	scheme := "http"
	if c.https {
		scheme = "https"
	}
	br, err := c.browser.load(ctx, site.URL(scheme, p, 0, tag))
	res := pageload.Result{PLT: br.PLT}
	var bytes int64
	for i := range site.Pages[p].Objects {
		bytes += int64(site.Size(scheme, p, i, tag))
	}
	switch want := len(site.Pages[p].Objects) - 1; {
	case err != nil:
		return res, err
	case len(br.Failed) > 0:
		return res, fmt.Errorf("browser: %d requests failed; the first: %s", len(br.Failed), br.Failed[0])
	case br.Resources != want:
		return res, fmt.Errorf("browser: %d of the page's %d objects fetched (other entries: %q)", br.Resources, want, br.Others)
	case br.Late > 0:
		return res, fmt.Errorf("browser: %d objects ended after the load event", br.Late)
	case br.Bytes != bytes:
		return res, fmt.Errorf("browser: %d of the page's %d bytes received", br.Bytes, bytes)
	}
	return res, nil
}

// sampleEstimates samples m's estimates of its paths, and what rt (if a
// Transport) received over each, every estimateEvery from start, until
// the function it returns is called; that returns the samples.
func sampleEstimates(m *intents.Manager, rt http.RoundTripper, start time.Time) func() []estimateSample {
	tr, _ := rt.(*intents.Transport)
	var samples []estimateSample
	take := func() {
		var stats map[string]intents.PathStats
		if tr != nil {
			stats = tr.Stats()
		}
		at := time.Since(start)
		for _, p := range m.Paths() {
			e := p.Estimate()
			samples = append(samples, estimateSample{At: at, Path: p.Name, Capacity: e.Bandwidth, RTT: e.RTT, Received: stats[p.Name].BytesReceived,
				Unresponsive: e.Unresponsive})
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(estimateEvery)
		defer tick.Stop()
		take()
		for {
			select {
			case <-stop:
				take()
				return
			case <-tick.C:
				take()
			}
		}
	}()
	return func() []estimateSample {
		close(stop)
		<-done
		return samples
	}
}

// loadTimeout bounds a page load: one that has not ended by then fails.
// A page of these workloads takes a minute on a 0.5 Mbit/s path alone.
const loadTimeout = 3 * time.Minute

// pathUse is what one path carried of a load, against its capacity.
type pathUse struct {
	path    string
	objects int
	bytes   int64
	rate    int64         // the path's downlink rate, bits/s of IP packets
	plt     time.Duration // the load's
	lastEnd time.Duration // when the path's last object was in
}

// pathUses sums a load's objects per path: rates are the paths' downlink
// rates, p1's first (a path not named pN, as localDev's "?", gets no
// share). A path whose bytes are far below its rate over the
// load, or whose last object is in well before the load's, carried less
// than it could: the trace of a slow load says at once where the time
// went, without summing its object lines by hand.
func pathUses(res pageload.Result, rates []int64) []pathUse {
	var uses []pathUse
	for _, o := range res.Objects {
		i := slices.IndexFunc(uses, func(u pathUse) bool { return u.path == o.Path })
		if i < 0 {
			uses = append(uses, pathUse{path: o.Path, plt: res.PLT})
			i = len(uses) - 1
			if n, err := strconv.Atoi(strings.TrimPrefix(o.Path, "p")); err == nil && n >= 1 && n <= len(rates) {
				uses[i].rate = rates[n-1]
			}
		}
		u := &uses[i]
		u.objects++
		u.bytes += o.Bytes
		u.lastEnd = max(u.lastEnd, o.End)
	}
	slices.SortFunc(uses, func(a, b pathUse) int { return strings.Compare(a.path, b.path) })
	return uses
}

// String reads, e.g., "p2 carried 7 objects, 700000 B: 58 % of 5.0
// Mbit/s over the load's 1.915s; its last one in 183ms before the
// load's". The share counts body bytes against the rate of IP packets: a
// path busy throughout shows about 96 % (headers of 52 bytes in each
// 1500).
func (u pathUse) String() string {
	s := fmt.Sprintf("%s carried %d objects, %d B", u.path, u.objects, u.bytes)
	if u.rate > 0 && u.plt > 0 {
		s += fmt.Sprintf(": %.0f %% of %.1f Mbit/s over the load's %v", 100*float64(u.bytes)*8/(float64(u.rate)*u.plt.Seconds()),
			float64(u.rate)/1e6, u.plt.Round(time.Millisecond))
	}
	return s + fmt.Sprintf("; its last one in %v before the load's", (u.plt-u.lastEnd).Round(time.Millisecond))
}

// movesOf is how many responses rt (an intents.Transport) moved, how many
// parts of responses it split off, and how many bodies it resumed, so far,
// over all paths.
func movesOf(rt http.RoundTripper) [3]int64 {
	var n [3]int64
	if tr, ok := rt.(*intents.Transport); ok {
		for _, st := range tr.Stats() {
			n[0] += st.Moved
			n[1] += st.Split
			n[2] += st.Resumed
		}
	}
	return n
}

// warmPaths fetches a byte over each path first, so that no contender's
// first load pays for the fresh namespaces' neighbour discovery.
func warmPaths() {
	for _, dev := range []string{"p1", "p2"} {
		rt := boundTransport(dev, pageload.MaxConnsPerHost)
		req, _ := http.NewRequest(http.MethodGet, "http://10.71.100.1/obj/1", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			log.Fatalf("warming up %s: %v", dev, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rt.CloseIdleConnections()
	}
}

// boundTransport is net/http on one path only.
func boundTransport(dev string, perHost int) *http.Transport {
	d := &net.Dialer{Control: bindControl(dev)}
	return &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: perHost}
}

// progress draws a bar on stderr, if it is a terminal.
func progress(done, total int, what string) {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return
	}
	const width = 30
	if total == 0 {
		fmt.Fprint(os.Stderr, "\r\033[K")
		return
	}
	n := done * width / total
	fmt.Fprintf(os.Stderr, "\r\033[K[%s%s] %d/%d loads  %s", strings.Repeat("#", n), strings.Repeat(".", width-n), done, total, what)
}

// localDev names the path by the connection's source address (10.71.i.1),
// TCP or UDP.
func localDev(c net.Conn) string {
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return "?"
	}
	return pathOfClient(ap.Addr())
}

// h3Contender is quic-go's HTTP/3 Transport on path dev only: its QUIC
// connections share one UDP socket bound to dev, as its own Transport
// shares one socket.
func h3Contender(key, dev string, ca []byte) contender {
	lc := net.ListenConfig{Control: bindControl(dev)}
	pc, err := lc.ListenPacket(context.Background(), "udp4", "10.71."+dev[1:]+".1:0") // the path's address (localDev)
	if err != nil {
		log.Fatal(err)
	}
	qt := &quic.Transport{Conn: pc}
	rt := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(ca)},
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			ua, err := net.ResolveUDPAddr("udp4", addr)
			if err != nil {
				return nil, err
			}
			return qt.DialEarly(ctx, ua, tlsCfg, cfg)
		}}
	return contender{key: key, rt: rt, https: true, fresh: true, close: func() {
		rt.Close()
		qt.Close()
		pc.Close()
	}}
}

// caPool trusts the web server's CA.
func caPool(der []byte) *x509.CertPool {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// bindControl binds a socket to the device dev.
func bindControl(dev string) func(_, _ string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = unix.BindToDevice(int(fd), dev) }); cerr != nil {
			return cerr
		}
		return err
	}
}
