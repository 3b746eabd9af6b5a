package intents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/sockintents/intents/internal/estimate"
)

// A Manager owns the table of paths, their resolvers and the policy: the
// in-process Multi Access Manager of the Socket Intents prototype. Dialers
// and Resolvers share one. A Manager is safe for concurrent use.
type Manager struct {
	cfg Config

	paths atomic.Pointer[[]*Path]
	// mu guards changed and the swap of a new table into paths (never the
	// discovery before it: netlink and sysfs reads run without it).
	// started numbers the refreshes begun, stored the one whose table
	// paths holds: a refresh that began earlier and ended later does not
	// replace a newer table.
	mu              sync.Mutex
	changed         chan struct{}
	started, stored uint64

	// testHookDiscovered, if set, is given what a refresh's discovery
	// found, before it is swapped in, and returns what is.
	testHookDiscovered func([]*Path) []*Path

	resolver *Resolver
	stop     func() error
	probing  chan struct{} // closed to stop the prober
	probed   chan struct{} // closed when the prober has stopped

	testHookProbed func() // called after each round of probes

	mptcp endpoints // the MPTCP endpoints it added (see mptcp_pm.go)

	estMu      sync.Mutex
	estimators map[string]*estimate.Path // guarded by estMu

	knowledge *knowledge    // nil without Config.Knowledge
	saving    chan struct{} // closed to stop the saver
	saved     chan struct{} // closed when the saver has stopped

	subsMu sync.Mutex
	subs   map[*func()]struct{} // called after each change of the table
}

// subscribe calls f after every change of the path table until the
// returned function is called.
func (m *Manager) subscribe(f func()) (unsubscribe func()) {
	m.subsMu.Lock()
	defer m.subsMu.Unlock()
	if m.subs == nil {
		m.subs = map[*func()]struct{}{}
	}
	m.subs[&f] = struct{}{}
	return func() {
		m.subsMu.Lock()
		defer m.subsMu.Unlock()
		delete(m.subs, &f)
	}
}

// NewManager discovers the paths described by cfg and, unless cfg.NoWatch,
// watches interface changes until Close.
func NewManager(cfg Config) (*Manager, error) {
	seen := map[string]bool{}
	for _, pc := range cfg.Paths {
		if pc.Interface == "" {
			return nil, errors.New("intents: PathConfig without Interface")
		}
		if seen[pc.Interface] {
			// Paths are told apart by name (their DNS caches, estimates,
			// statistics): one would answer for the other.
			return nil, fmt.Errorf("intents: path %s configured twice", pc.Interface)
		}
		seen[pc.Interface] = true
		for _, s := range pc.DNS {
			if _, err := parseServer(s); err != nil {
				return nil, fmt.Errorf("intents: path %s: %w", pc.Interface, err)
			}
		}
		for _, s := range pc.DNSOverTLS {
			if _, err := parseTLSServer(s); err != nil {
				return nil, fmt.Errorf("intents: path %s: %w", pc.Interface, err)
			}
		}
		for _, s := range pc.DNSOverHTTPS {
			if _, err := parseHTTPSServer(s); err != nil {
				return nil, fmt.Errorf("intents: path %s: %w", pc.Interface, err)
			}
		}
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = "/etc/resolv.conf"
	}
	if cfg.HostsFile == "" {
		cfg.HostsFile = "/etc/hosts"
	}
	m := &Manager{cfg: cfg, changed: make(chan struct{}), estimators: map[string]*estimate.Path{}}
	m.resolver = &Resolver{Manager: m}
	if cfg.Knowledge != "" {
		m.knowledge = loadKnowledge(cfg.Knowledge, cmp.Or(cfg.Logger, slog.Default()))
	}
	if err := m.Refresh(); err != nil {
		return nil, err
	}
	if m.knowledge != nil {
		m.saving, m.saved = make(chan struct{}), make(chan struct{})
		go m.keepSaving()
	}
	if cfg.MPTCPEndpoints {
		ensure := func() { m.mptcp.ensure(m.Paths()) }
		ensure()
		m.subscribe(ensure)
	}
	if !cfg.NoWatch {
		stop, err := watchInterfaces(func() { _ = m.Refresh() })
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return nil, fmt.Errorf("intents: watching interfaces: %w", err)
		}
		m.stop = stop
	}
	if cfg.ProbeTarget != "" {
		if _, _, err := net.SplitHostPort(cfg.ProbeTarget); err != nil {
			m.Close()
			return nil, fmt.Errorf("intents: probe target: %w", err)
		}
		m.probing, m.probed = make(chan struct{}), make(chan struct{})
		go m.probe()
	}
	return m, nil
}

// Close stops watching interface changes and probing, and saves what was
// learnt of the paths (Config.Knowledge). The Manager's table stays
// usable.
func (m *Manager) Close() error {
	if m.saving != nil {
		select {
		case <-m.saving:
		default:
			close(m.saving)
		}
		<-m.saved
	}
	m.resolver.wire.Close()
	m.mptcp.remove()
	if m.probing != nil {
		select {
		case <-m.probing:
		default:
			close(m.probing)
		}
		<-m.probed
	}
	if m.stop != nil {
		return m.stop()
	}
	return nil
}

// probe connects to the probe target through every up path once per
// interval until Close.
func (m *Manager) probe() {
	defer close(m.probed)
	interval := m.cfg.ProbeInterval
	if interval == 0 {
		interval = 10 * time.Second
	}
	interval = max(interval, probeIntervalFloor)
	host, portText, _ := net.SplitHostPort(m.cfg.ProbeTarget)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	d := &Dialer{Timeout: max(interval, 2*time.Second)}
	for {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), probeKey{}, true))
		go func() { // Close interrupts a round
			select {
			case <-m.probing:
			case <-ctx.Done():
			}
			cancel()
		}()
		for _, p := range m.Paths() {
			if !p.Up || p.Type == TypeLoopback {
				continue
			}
			port, err := net.DefaultResolver.LookupPort(ctx, "tcp", portText)
			if err != nil {
				break
			}
			if c, err := d.dialChoice(ctx, m, "tcp", host, uint16(port), Choice{Path: p}, MultipathUnspecified); err == nil {
				c.Close() // the dial recorded the connect time as a probe
			}
		}
		cancel()
		if m.testHookProbed != nil {
			m.testHookProbed()
		}
		select {
		case <-m.probing:
			return
		case <-ticker.C:
		}
	}
}

// Paths returns a snapshot of the path table. The paths must not be modified.
func (m *Manager) Paths() []*Path { return *m.paths.Load() }

// Path returns the path of the named interface, or nil.
func (m *Manager) Path(name string) *Path {
	for _, p := range m.Paths() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Policy returns the manager's policy (nil: operating system routing).
func (m *Manager) Policy() Policy { return m.cfg.Policy }

// Resolver returns the manager's per-path resolver.
func (m *Manager) Resolver() *Resolver { return m.resolver }

// Changed returns a channel that is closed at the next change of the path
// table, so callers can wait for a change without polling.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Refresh re-reads interfaces, addresses and DNS configuration now. The
// Manager calls it on every interface event; call it yourself where events
// are not watched.
func (m *Manager) Refresh() error {
	changed, err := m.refresh()
	if changed {
		m.subsMu.Lock()
		subs := make([]func(), 0, len(m.subs))
		for f := range m.subs {
			subs = append(subs, *f)
		}
		m.subsMu.Unlock()
		for _, f := range subs {
			f()
		}
	}
	return err
}

func (m *Manager) refresh() (changed bool, err error) {
	m.mu.Lock()
	m.started++
	gen := m.started
	m.mu.Unlock()
	paths, err := m.discover()
	if err != nil {
		return false, err
	}
	if m.testHookDiscovered != nil {
		paths = m.testHookDiscovered(paths)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen < m.stored {
		return false, nil // a refresh begun later has stored what it found
	}
	m.stored = gen
	if old := m.paths.Load(); old != nil && slices.EqualFunc(*old, paths, pathEqual) {
		return false, nil
	}
	m.paths.Store(&paths)
	close(m.changed)
	m.changed = make(chan struct{})
	if m.resolver != nil {
		m.resolver.prune(paths)
	}
	return true, nil
}

func (m *Manager) discover() ([]*Path, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("intents: listing interfaces: %w", err)
	}
	sys, _ := dns.ClientConfigFromFile(m.cfg.ResolvConf) // a missing file leaves paths without DNS
	var paths []*Path
	// Each Addrs call is a netlink dump on Linux: one per interface.
	// prefixes of each interface, for its network's identity (see
	// networkID)
	prefixes := map[string][]netip.Prefix{}
	addrsOf := func(ifi net.Interface) []netip.Addr {
		addrs, err := ifi.Addrs()
		if err != nil {
			return nil
		}
		usable := usableAddrs(addrs)
		var all []netip.Prefix
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ip, ok := netip.AddrFromSlice(ipn.IP)
				ones, _ := ipn.Mask.Size()
				if ok {
					all = append(all, netip.PrefixFrom(ip.Unmap(), ones))
				}
			}
		}
		prefixes[ifi.Name] = prefixesOf(all, usable)
		return usable
	}
	add := func(ifi net.Interface, pc *PathConfig, addrs []netip.Addr) {
		p := &Path{Name: ifi.Name, Index: ifi.Index, Addrs: addrs, prefixes: prefixes[ifi.Name],
			Up: ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0}
		p.Type = classify(ifi)
		if pc != nil && pc.Type != TypeUnspecified {
			p.Type = pc.Type
		}
		p.Expensive = p.Type == TypeCellular
		if pc != nil {
			if pc.Expensive != nil {
				p.Expensive = *pc.Expensive
			}
			if pc.Constrained != nil {
				p.Constrained = *pc.Constrained
			}
			p.Prior = Estimate{RTT: pc.RTT, MinRTT: pc.RTT, Bandwidth: pc.Bandwidth}
		}
		m.pathDNS(p, pc, sys)
		p.est = m.estimatorOf(p) // after the DNS servers, which name its network
		paths = append(paths, p)
	}
	if len(m.cfg.Paths) == 0 {
		for _, ifi := range ifs {
			if addrs := addrsOf(ifi); len(addrs) > 0 {
				add(ifi, nil, addrs)
			}
		}
		return paths, nil
	}
	for i := range m.cfg.Paths {
		pc := &m.cfg.Paths[i]
		idx := slices.IndexFunc(ifs, func(ifi net.Interface) bool { return ifi.Name == pc.Interface })
		if idx < 0 {
			// A configured interface that is absent is a path that is down.
			paths = append(paths, &Path{Name: pc.Interface, Type: max(pc.Type, TypeOther)})
			continue
		}
		add(ifs[idx], pc, addrsOf(ifs[idx]))
	}
	return paths, nil
}

// estimatorOf returns the estimator of p's interface: estimates outlive
// the table's snapshots, keyed by interface name.
func (m *Manager) estimatorOf(p *Path) *estimate.Path {
	m.estMu.Lock()
	defer m.estMu.Unlock()
	est := m.estimators[p.Name]
	if est == nil {
		est = estimate.New(p.Prior.RTT, float64(p.Prior.Bandwidth))
		if m.knowledge != nil {
			m.knowledge.restore(networkID(p), est)
		}
		m.estimators[p.Name] = est
	}
	return est
}

// pathDNS fills the DNS servers of p: configuration first, then the
// per-link state of systemd-resolved, then the system's resolv.conf. The
// encrypted ones: configuration, else systemd-resolved's where its
// DNSOverTLS= is set for the link.
func (m *Manager) pathDNS(p *Path, pc *PathConfig, sys *dns.ClientConfig) {
	if pc != nil && len(pc.DNS) > 0 {
		for _, s := range pc.DNS {
			ap, _ := parseServer(s) // validated in NewManager
			p.DNS = append(p.DNS, ap)
		}
		p.DNSSource = "config"
	} else if lr, ok := linkDNS(p.Index); ok {
		p.DNS, p.Search, p.DNSSource = lr.servers, lr.search, "systemd-resolved"
		// resolved's DNSOverTLS= for the link: its servers over TLS, and
		// in plaintext too only where it is opportunistic.
		if lr.dotMode == "yes" || lr.dotMode == "opportunistic" {
			p.DNSOverTLS, p.DNSPlaintextFallback = lr.tls, lr.dotMode == "opportunistic"
		}
	} else if sys != nil {
		for _, s := range sys.Servers {
			if ap, err := parseServer(s); err == nil {
				p.DNS = append(p.DNS, netip.AddrPortFrom(ap.Addr(), portOr(sys.Port)))
			}
		}
		p.Search, p.DNSSource = trimDots(sys.Search), "resolv.conf"
	}
	if pc != nil && pc.Search != nil {
		p.Search = trimDots(pc.Search)
	}
	if pc != nil && (len(pc.DNSOverTLS) > 0 || len(pc.DNSOverHTTPS) > 0) {
		// Configured encrypted servers replace the discovered ones.
		p.DNSOverTLS = nil
		for _, s := range pc.DNSOverTLS {
			srv, _ := parseTLSServer(s) // validated in NewManager
			p.DNSOverTLS = append(p.DNSOverTLS, srv)
		}
		for _, s := range pc.DNSOverHTTPS {
			srv, _ := parseHTTPSServer(s) // validated in NewManager
			p.DNSOverHTTPS = append(p.DNSOverHTTPS, srv)
		}
		p.DNSPlaintextFallback = pc.DNSPlaintextFallback
	}
}

// otherPathUp reports whether a path other than the one named is up (not
// loopback).
func (m *Manager) otherPathUp(name string) bool {
	for _, p := range m.Paths() {
		if p.Name != name && p.Up && p.Type != TypeLoopback {
			return true
		}
	}
	return false
}

// The process-wide Manager (DefaultManager).
var (
	defaultManagerMu  sync.Mutex
	defaultManager    *Manager
	defaultManagerErr error
)

// DefaultManager returns the process-wide Manager that discovers every
// interface and uses no policy. A Dialer, Resolver, Pool or Transport
// without a Manager uses it when intents constrain paths. It is created on
// first use and then watches interface changes with a goroutine of its own
// until CloseDefaultManager (tests that check for leaked goroutines call
// that, or create no intents that constrain paths without a Manager).
func DefaultManager() (*Manager, error) {
	defaultManagerMu.Lock()
	defer defaultManagerMu.Unlock()
	if defaultManager == nil && defaultManagerErr == nil {
		defaultManager, defaultManagerErr = NewManager(Config{})
	}
	return defaultManager, defaultManagerErr
}

// CloseDefaultManager closes the Manager DefaultManager made, if it made
// one, stopping its watcher; the next DefaultManager call makes a new one.
func CloseDefaultManager() error {
	defaultManagerMu.Lock()
	m := defaultManager
	defaultManager, defaultManagerErr = nil, nil
	defaultManagerMu.Unlock()
	if m == nil {
		return nil
	}
	return m.Close()
}
