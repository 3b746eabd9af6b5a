package intents

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/sockintents/intents/internal/dnsclient"
	"github.com/sockintents/intents/internal/sockopt"
)

// Resolver resolves names per path: each path's names are looked up at that
// path's DNS servers, with queries leaving through that path, and a reply
// from one path's servers is never used for another path (CDNs answer by
// where the query came from). A zero Resolver uses DefaultManager and
// defaults from resolv.conf. A Resolver is safe for concurrent use; it keeps
// a cache per path, honouring TTLs and negative answers.
type Resolver struct {
	// Manager supplies the paths and the policy; nil uses DefaultManager.
	Manager *Manager
	// Timeout bounds one query to one server (default: resolv.conf's
	// timeout, else 2s).
	Timeout time.Duration
	// Attempts is how many rounds over a path's servers are tried (default:
	// resolv.conf's attempts, else 2).
	Attempts int
	// Ndots is the resolv.conf ndots option (default: resolv.conf's, else 1).
	Ndots int
	// MaxTTL caps how long an answer is cached, whatever TTL the server
	// gave (default 24 h).
	MaxTTL time.Duration

	once  sync.Once
	mu    sync.Mutex
	cache map[cacheKey]cacheEntry
	next  map[string]int // per path: index of the server to ask first
	hosts hostsTable
	now   func() time.Time // for tests; nil is time.Now

	// wire speaks to the servers, and keeps encrypted connections per
	// path between queries.
	wire dnsclient.Client
}

func (r *Resolver) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

type cacheKey struct {
	path  string
	name  string
	qtype uint16
}

type cacheEntry struct {
	addrs   []netip.Addr
	rcode   int // dns.RcodeSuccess with no addrs: NODATA
	expires time.Time
}

// maxCacheEntries bounds the cache; when full, expired entries are dropped
// and, if that is not enough, the whole cache.
const maxCacheEntries = 4096

func (r *Resolver) init() {
	r.once.Do(func() {
		r.cache = make(map[cacheKey]cacheEntry)
		r.next = make(map[string]int)
		m := r.Manager
		resolvConf, hostsFile := "/etc/resolv.conf", "/etc/hosts"
		if m != nil {
			resolvConf, hostsFile = m.cfg.ResolvConf, m.cfg.HostsFile
		}
		r.hosts.path = hostsFile
		if cc, err := dns.ClientConfigFromFile(resolvConf); err == nil {
			if r.Timeout == 0 {
				r.Timeout = time.Duration(cc.Timeout) * time.Second
			}
			if r.Attempts == 0 {
				r.Attempts = cc.Attempts
			}
			if r.Ndots == 0 {
				r.Ndots = cc.Ndots
			}
		}
		if r.Timeout <= 0 {
			r.Timeout = 2 * time.Second
		}
		if r.Attempts <= 0 {
			r.Attempts = 2
		}
		if r.Ndots <= 0 {
			r.Ndots = 1
		}
		if r.MaxTTL <= 0 {
			r.MaxTTL = defaultMaxTTL
		}
		r.wire.Timeout = r.Timeout
		if m != nil {
			r.wire.TLSConfig = m.cfg.DNSTLSConfig
		}
	})
}

func (r *Resolver) manager() (*Manager, error) {
	if r.Manager != nil {
		return r.Manager, nil
	}
	return DefaultManager()
}

// prune forgets the cached answers and closes the kept encrypted
// connections of paths that are gone or down.
func (r *Resolver) prune(paths []*Path) {
	r.init() // the cache is made there
	live := make(map[string]bool, len(paths))
	for _, p := range paths {
		live[p.Name] = p.Up
	}
	r.mu.Lock()
	for k := range r.cache {
		if !live[k.path] {
			delete(r.cache, k)
		}
	}
	r.mu.Unlock()
	r.wire.Forget(func(path string) bool { return !live[path] })
}

// Endpoint is one way to reach a destination: a remote address, and the
// path, local address and socket options to reach it with. Endpoints come
// from Resolver.LookupEndpoints, ordered by the policy.
type Endpoint struct {
	Remote netip.AddrPort
	// Path is nil when the operating system's routing chooses (a nil
	// *Path prints as "system"; check for nil before reading its fields).
	Path *Path
	// Local is the source address to bind (invalid when Path is nil).
	Local netip.Addr
	// MPTCP asks for Multipath TCP with the first subflow on Path.
	MPTCP bool
}

// Control binds a socket to the endpoint's interface; it has the signature
// of net.Dialer.Control. Where the OS cannot bind to an interface (or, on
// Linux before 5.7, the process lacks CAP_NET_RAW) only the source address
// steers the socket, which needs source-based routing to be reliable.
func (e Endpoint) Control(network, _ string, c syscall.RawConn) error {
	if e.Path == nil {
		return nil
	}
	err := sockopt.BindToInterface(c, e.Path.Index, e.Path.Name, strings.HasSuffix(network, "6"))
	if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EPERM) {
		return nil
	}
	return err
}

// Dialer returns a copy of base (nil: a zero net.Dialer) that connects as e
// says: source address, interface binding (after base's own Control, which
// still runs), and MPTCP.
func (e Endpoint) Dialer(base *net.Dialer) *net.Dialer {
	var d net.Dialer
	if base != nil {
		d = *base
	}
	if e.Path != nil {
		d.LocalAddr = localAddr("tcp", e.Local)
		d.ControlContext = chainControl(func(_ context.Context, network, address string, c syscall.RawConn) error {
			return e.Control(network, address, c)
		}, d.Control, d.ControlContext)
		d.Control = nil
	}
	if e.MPTCP {
		d.SetMultipathTCP(true)
	}
	return &d
}

func localAddr(network string, a netip.Addr) net.Addr {
	if !a.IsValid() {
		return nil
	}
	if strings.HasPrefix(network, "udp") {
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0))
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 0))
}

// LookupEndpoints resolves host on the paths the policy chooses for the
// intents in ctx, and returns the endpoints best first: for each chosen
// path, its addresses for host (from that path's DNS) with the source
// address and binding to use. network is "tcp", "tcp4", "tcp6", "udp", ....
// This is the paper's "augmented name resolution": the caller connects
// itself, e.g. with Endpoint.Dialer.
func (r *Resolver) LookupEndpoints(ctx context.Context, network, host, port string) ([]Endpoint, error) {
	portNum, err := net.DefaultResolver.LookupPort(ctx, network, port)
	if err != nil {
		return nil, err
	}
	m, err := r.manager()
	if err != nil {
		return nil, err
	}
	pl, err := m.plan(ctx, network, host, uint16(portNum), true)
	if err != nil {
		return nil, err
	}
	var eps []Endpoint
	var errs []*PathError
	for _, c := range pl.choices {
		addrs, err := r.lookupChoice(ctx, network, host, c.Path)
		if err != nil {
			errs = append(errs, &PathError{Path: pathName(c.Path), Err: err})
			continue
		}
		for _, a := range addrs {
			ep := Endpoint{Remote: netip.AddrPortFrom(a, uint16(portNum)), Path: c.Path, MPTCP: pl.multipath(c) >= MultipathHandover}
			if c.Path != nil {
				ep.Local, _ = c.Path.Addr(a)
			}
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil, pathErrors(errs)
	}
	return eps, nil
}

// lookupChoice resolves host for one choice: on the path, or through the
// system resolver when the OS routes.
func (r *Resolver) lookupChoice(ctx context.Context, network, host string, p *Path) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if p == nil {
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, ipNetwork(network), host)
		for i := range addrs {
			addrs[i] = addrs[i].Unmap()
		}
		return addrs, err
	}
	return r.LookupPath(ctx, p, network, host)
}

func ipNetwork(network string) string {
	switch networkFamily(network) {
	case 4:
		return "ip4"
	case 6:
		return "ip6"
	}
	return "ip"
}

// LookupPath resolves host on path p only: /etc/hosts, then p's DNS servers
// through p, A and AAAA in parallel (only the families p has addresses of and
// network allows), following p's search domains and ndots. Addresses are
// returned IPv6 first, interleaved with IPv4 (RFC 8305), when both exist.
// Errors are *net.DNSError: a name no host can have (as Go's resolver
// judges it: a space, a parenthesis, a non-ASCII byte) is not found at
// once, without asking a server, and a nil p is an error.
func (r *Resolver) LookupPath(ctx context.Context, p *Path, network, host string) ([]netip.Addr, error) {
	if p == nil {
		return nil, &net.DNSError{Err: errNilPath.Error(), Name: host}
	}
	r.init()
	fam := networkFamily(network)
	want4 := fam != 6 && hasFamily(p, 4)
	want6 := fam != 4 && hasFamily(p, 6)
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if addrs := r.hosts.lookup(host); len(addrs) > 0 {
		var out []netip.Addr
		for _, a := range addrs {
			if (a.Is4() && want4) || (a.Is6() && want6) {
				out = append(out, a)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	if !want4 && !want6 {
		return nil, &net.DNSError{Err: "path " + p.Name + " has no address of the requested family", Name: host, IsNotFound: true}
	}
	if !isDomainName(host) {
		// As Go's resolver: no server is asked for a name no host can
		// have (a DNS answer names it escaped, a\ b., and would not
		// match the question as sent).
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if len(p.DNS) == 0 {
		return nil, &net.DNSError{Err: "path " + p.Name + " has no DNS servers", Name: host}
	}
	cc := dns.ClientConfig{Search: p.Search, Ndots: r.Ndots}
	var lastErr error
	for _, name := range cc.NameList(host) {
		v4, v6, err := r.lookupName(ctx, p, name, want4, want6)
		if len(v4)+len(v6) > 0 {
			return interleave(v6, v4), nil
		}
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
		}
	}
	if lastErr == nil {
		lastErr = &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return nil, lastErr
}

func interleave(a, b []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(a)+len(b))
	for i := 0; i < len(a) || i < len(b); i++ {
		if i < len(a) {
			out = append(out, a[i])
		}
		if i < len(b) {
			out = append(out, b[i])
		}
	}
	return out
}

// lookupName asks for A and AAAA of the fully qualified name in parallel.
func (r *Resolver) lookupName(ctx context.Context, p *Path, name string, want4, want6 bool) (v4, v6 []netip.Addr, err error) {
	var err4, err6 error
	var wg sync.WaitGroup
	if want4 && want6 {
		wg.Go(func() { v6, err6 = r.query(ctx, p, name, dns.TypeAAAA) })
		v4, err4 = r.query(ctx, p, name, dns.TypeA)
		wg.Wait()
	} else if want4 {
		v4, err4 = r.query(ctx, p, name, dns.TypeA)
	} else {
		v6, err6 = r.query(ctx, p, name, dns.TypeAAAA)
	}
	if err4 != nil {
		return v4, v6, err4
	}
	return v4, v6, err6
}

// query answers one question on one path, from the cache or the path's
// servers. A name that does not exist, or has no record of the type, gives
// no addresses and no error unless neither family has any.
func (r *Resolver) query(ctx context.Context, p *Path, name string, qtype uint16) ([]netip.Addr, error) {
	key := cacheKey{path: p.Name, name: strings.ToLower(name), qtype: qtype}
	now := r.clock()
	r.mu.Lock()
	e, ok := r.cache[key]
	start := r.next[p.Name]
	r.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.addrs, rcodeErr(e.rcode, name)
	}

	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(dnsclient.EDNSSize, false)
	via := r.route(p)
	var lastErr error
	// done takes a server's reply: true if the query is answered.
	var addrs []netip.Addr
	var rerr error
	done := func(server string, reply *dns.Msg, err error) bool {
		if err == nil {
			err = dnsclient.CheckReply(m, reply)
		}
		if err != nil {
			lastErr = &net.DNSError{Err: err.Error(), UnwrapErr: err, Name: name, Server: server, IsTimeout: isTimeout(err)}
			return false
		}
		var ttl time.Duration
		addrs, ttl = dnsclient.Extract(reply, name, qtype)
		r.store(key, cacheEntry{addrs: addrs, rcode: reply.Rcode, expires: r.clock().Add(min(ttl, r.MaxTTL))})
		rerr = rcodeErr(reply.Rcode, name)
		return true
	}
	plaintext := len(p.DNSOverTLS) == 0 && len(p.DNSOverHTTPS) == 0 || p.DNSPlaintextFallback
	for attempt := 0; attempt < r.Attempts; attempt++ {
		// Encrypted servers first; plaintext ones only if the path has
		// none, or may fall back to them.
		for _, srv := range p.DNSOverTLS {
			reply, err := r.wire.ExchangeTLS(ctx, via, srv.Addr, srv.Name, m)
			if done(srv.String(), reply, err) {
				return addrs, rerr
			}
			if ctx.Err() != nil {
				return nil, lastErr
			}
		}
		for _, srv := range p.DNSOverHTTPS {
			reply, err := r.wire.ExchangeHTTPS(ctx, via, srv.URL, srv.Addr, m)
			if done(srv.URL, reply, err) {
				return addrs, rerr
			}
			if ctx.Err() != nil {
				return nil, lastErr
			}
		}
		if !plaintext {
			continue
		}
		for i := range p.DNS {
			si := (start + i) % len(p.DNS)
			server := p.DNS[si]
			reply, err := r.wire.Exchange(ctx, via, server, m)
			if done(server.String(), reply, err) {
				r.mu.Lock()
				r.next[p.Name] = si // stay with a server that answers
				r.mu.Unlock()
				return addrs, rerr
			}
			if ctx.Err() != nil {
				return nil, lastErr
			}
		}
	}
	if !plaintext && lastErr != nil {
		lastErr = &net.DNSError{Err: lastErr.Error() + " (not asked in plaintext: " + errNoPlaintext.Error() + ")",
			UnwrapErr: errors.Join(lastErr, errNoPlaintext), Name: name, IsTimeout: isTimeout(lastErr)}
	}
	return nil, lastErr
}

func rcodeErr(rcode int, name string) error {
	if rcode == dns.RcodeNameError {
		return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (r *Resolver) store(k cacheKey, e cacheEntry) {
	now := r.clock()
	if !e.expires.After(now) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxCacheEntries {
		for k, v := range r.cache {
			if !now.Before(v.expires) {
				delete(r.cache, k)
			}
		}
		if len(r.cache) >= maxCacheEntries {
			clear(r.cache)
		}
	}
	r.cache[k] = e
}

// route is how queries reach p's servers: dialed through p.
func (r *Resolver) route(p *Path) dnsclient.Route {
	return dnsclient.Route{Name: p.Name, Dial: func(ctx context.Context, network string, server netip.AddrPort) (net.Conn, error) {
		return r.dialPath(ctx, p, server, network)
	}}
}

// dialPath connects to server through p: bound to p unless server is a
// loopback address (a local stub resolver), which no interface binding
// can reach.
func (r *Resolver) dialPath(ctx context.Context, p *Path, server netip.AddrPort, network string) (net.Conn, error) {
	var d net.Dialer
	if !server.Addr().IsLoopback() {
		local, ok := p.Addr(server.Addr())
		if !ok {
			return nil, errors.New("path " + p.Name + " has no address of the server's family")
		}
		d = *Endpoint{Path: p, Local: local}.Dialer(nil)
		d.LocalAddr = localAddr(network, local)
	}
	return d.DialContext(ctx, network, server.String())
}

// defaultMaxTTL is how long the Resolver caches an answer at most, by
// default.
const defaultMaxTTL = 24 * time.Hour

// hostsTable reads a hosts file, again when it changes; it looks for a
// change at most every hostsCheckInterval, as the standard library's
// resolver does, not on every lookup.
type hostsTable struct {
	path    string
	mu      sync.Mutex
	checked time.Time
	mtime   time.Time
	size    int64
	names   map[string][]netip.Addr
}

const hostsCheckInterval = 5 * time.Second

func (h *hostsTable) lookup(host string) []netip.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := time.Now(); now.Sub(h.checked) >= hostsCheckInterval {
		h.checked = now
		fi, err := os.Stat(h.path)
		if err != nil {
			h.names = nil
		} else if !fi.ModTime().Equal(h.mtime) || fi.Size() != h.size {
			h.mtime, h.size = fi.ModTime(), fi.Size()
			h.names = readHosts(h.path)
		}
	}
	return h.names[strings.ToLower(strings.TrimSuffix(host, "."))]
}

func readHosts(path string) map[string][]netip.Addr {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	names := make(map[string][]netip.Addr)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		a = a.Unmap().WithZone("")
		for _, n := range fields[1:] {
			n = strings.ToLower(strings.TrimSuffix(n, "."))
			names[n] = append(names[n], a)
		}
	}
	return names
}

// errNilPath is what a function given a nil *Path says: Manager.Path
// returns nil for an interface the Manager does not know.
var errNilPath = errors.New("intents: no path (a nil *Path: Manager.Path returns nil for an interface it does not know)")

// isDomainName reports whether s is a name a host can have, by the rule
// of Go's own resolver (RFC 1035 and 3696, underscores allowed):
// letters, digits, hyphens and underscores in labels of 1 to 63 bytes,
// no label starting or ending with a hyphen, at most 253 bytes (254 with
// the final dot), and not all digits.
func isDomainName(s string) bool {
	if s == "." {
		return true
	}
	l := len(s)
	if l == 0 || l > 254 || l == 254 && s[l-1] != '.' {
		return false
	}
	last := byte('.')
	nonNumeric := false
	partlen := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_':
			nonNumeric = true
			partlen++
		case '0' <= c && c <= '9':
			partlen++
		case c == '-':
			if last == '.' {
				return false
			}
			partlen++
			nonNumeric = true
		case c == '.':
			if last == '.' || last == '-' || partlen > 63 || partlen == 0 {
				return false
			}
			partlen = 0
		default:
			return false
		}
		last = c
	}
	return last != '-' && partlen <= 63 && nonNumeric
}
