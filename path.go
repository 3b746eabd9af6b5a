package intents

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sockintents/intents/internal/estimate"
)

// A Path is one local access network: an interface with its addresses, its
// DNS servers, its labels and what is known about its performance. Paths
// handed out by a Manager are snapshots and must not be modified.
type Path struct {
	Name  string        // interface name, e.g. "wlan0"
	Index int           // interface index
	Type  InterfaceType // never TypeUnspecified
	Up    bool          // administratively up and running

	// Addrs are the usable unicast addresses, IPv4 first. Link-local
	// addresses are left out: they cannot reach beyond the link.
	Addrs []netip.Addr
	// DNS are the name servers queried through this path, with port.
	DNS []netip.AddrPort
	// DNSOverTLS and DNSOverHTTPS are the path's encrypted DNS servers
	// (RFC 7858, RFC 8484), asked through this path before DNS, and
	// instead of it unless DNSPlaintextFallback (see PathConfig).
	DNSOverTLS           []EncryptedDNS
	DNSOverHTTPS         []EncryptedDNS
	DNSPlaintextFallback bool
	// Search are the DNS search domains for this path.
	Search []string
	// DNSSource says where DNS came from: "config", "systemd-resolved"
	// or "resolv.conf".
	DNSSource string

	Expensive   bool // metered, e.g. cellular
	Constrained bool // low data mode

	// Prior is what is assumed of the path before it is measured: the
	// RTT and Bandwidth of its PathConfig.
	Prior Estimate

	est      *estimate.Path // live estimates, shared by the path's snapshots
	prefixes []netip.Prefix // of Addrs, for its network's identity
}

// Estimate is what is known about a path's performance. Zero fields are
// unknown.
type Estimate struct {
	RTT       time.Duration // smoothed round-trip time
	RTTVar    time.Duration // its variation
	MinRTT    time.Duration // windowed minimum (10 min) of the samples, connections' own (TCP_INFO) minima among them
	Bandwidth int64         // capacity, bits/s: windowed maximum delivery rate, at least the prior
	// BandwidthFloor says Bandwidth is only a lower bound: no prior was
	// given and no transfer has shown the path's capacity yet (small
	// objects over a long RTT end in slow start, before the path limits
	// them).
	BandwidthFloor bool
	Rate           int64         // current delivery rate, bits/s
	Active         int           // connections with transfers in progress
	Loss           float64       // share of segments lost, 0..1
	Measured       bool          // RTT is measured, not only the prior
	Samples        int           // RTT samples behind RTT (an earlier Manager's too, where Remembered)
	Pending        int64         // bytes expected by this library's transfers in progress
	ProbeRTT       time.Duration // median connect time of recent active probes (0: none)
	// Unresponsive: connections on the path received nothing for several
	// RTTs while they were owed data, and a probe through the path got no
	// answer either, although the link is up (a blackhole). Decisions
	// leave the path out while another may be used, until a connection
	// through it succeeds again (it is probed meanwhile, at the silent
	// peer and at the path's DNS servers). Noticed by a
	// Transport's HTTP connections over TCP (Linux: TCP_INFO); an HTTP/3
	// connection that stops hearing from its path moves off it instead
	// (UDP may be what is blocked there).
	Unresponsive bool
	// Remembered: some of the above stands on what an earlier Manager
	// measured on the same network (Config.Knowledge), which this one
	// goes on from as that one would have: the RTTs until a connection
	// here measures one, the rates and capacity until a transfer here
	// delivers. Age is how old those measurements are.
	Remembered bool
	Age        time.Duration
}

// FreeBandwidth is the capacity share a new transfer can expect, the
// Socket Intents prototype's rule: Bandwidth / (Active·Rate/Bandwidth + 1).
func (e Estimate) FreeBandwidth() int64 {
	if e.Bandwidth <= 0 {
		return 0
	}
	return int64(float64(e.Bandwidth) / (float64(e.Active)*float64(e.Rate)/float64(e.Bandwidth) + 1))
}

// Estimate returns what is known about the path now: measurements of the
// connections this library made on it, the prior where there are none.
func (p *Path) Estimate() Estimate {
	if p == nil {
		return Estimate{}
	}
	if p.est == nil {
		return p.Prior
	}
	s := p.est.Snapshot()
	return Estimate{RTT: s.RTT, RTTVar: s.RTTVar, MinRTT: s.MinRTT, Bandwidth: int64(s.MaxRate), BandwidthFloor: !s.CapacityShown, Rate: int64(s.Rate),
		Active: s.Active, Loss: s.Loss, Measured: s.Samples > 0, Samples: s.Samples, Pending: s.Pending, ProbeRTT: s.ProbeRTT, Unresponsive: s.Unresponsive,
		Remembered: s.Remembered, Age: s.Age}
}

// Addr returns the path's first address of the family of remote (IPv4 or
// IPv6), and whether there is one.
func (p *Path) Addr(remote netip.Addr) (netip.Addr, bool) {
	if p == nil {
		return netip.Addr{}, false
	}
	for _, a := range p.Addrs {
		if a.Is4() == remote.Unmap().Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// String returns the interface name, and "system" for a nil Path: what
// the operating system's routing chose (an OS-routed connection, an
// Endpoint without a path).
func (p *Path) String() string {
	if p == nil {
		return "system"
	}
	return p.Name
}

// probeIntervalFloor keeps probing a trickle; tests lower it.
var probeIntervalFloor = time.Second

type probeKey struct{}

func pathEqual(a, b *Path) bool {
	return a.Name == b.Name && a.Index == b.Index && a.Type == b.Type && a.Up == b.Up &&
		slices.Equal(a.Addrs, b.Addrs) && slices.Equal(a.DNS, b.DNS) && slices.Equal(a.Search, b.Search) &&
		a.Expensive == b.Expensive && a.Constrained == b.Constrained && a.Prior == b.Prior
}

// linkResolver is a link's DNS state as systemd-resolved keeps it.
type linkResolver struct {
	servers []netip.AddrPort
	tls     []EncryptedDNS // the same servers over TLS: port 853 unless given, the #name
	search  []string
	dotMode string // its DNSOverTLS= ("yes", "opportunistic", "no"), if set
}

func portOr(s string) uint16 {
	var n uint16
	if _, err := fmt.Sscan(s, &n); err != nil || n == 0 {
		return 53
	}
	return n
}

func trimDots(domains []string) []string {
	out := make([]string, 0, len(domains))
	for _, d := range domains {
		if d = strings.Trim(d, "."); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// parseServer reads "ADDR" or "ADDR:PORT" / "[ADDR]:PORT".
func parseServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return netip.AddrPort{}, fmt.Errorf("bad DNS server %q: port 0", s)
		}
		return ap, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad DNS server %q: want ADDR or ADDR:PORT", s)
	}
	return netip.AddrPortFrom(a.WithZone(""), 53), nil
}

func usableAddrs(addrs []net.Addr) []netip.Addr {
	var v4, v6 []netip.Addr
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return append(v4, v6...)
}

// classifyByName applies the name hints shared by every OS.
func classifyByName(ifi net.Interface) (InterfaceType, bool) {
	if ifi.Flags&net.FlagLoopback != 0 {
		return TypeLoopback, true
	}
	for _, prefix := range []string{"wwan", "rmnet", "ccmni", "pdp_ip", "usb", "wwp"} {
		if strings.HasPrefix(ifi.Name, prefix) {
			return TypeCellular, true
		}
	}
	return 0, false
}

// sampleRTT feeds a round-trip time (a connection's set-up time) to the
// path's estimates.
func (p *Path) sampleRTT(d time.Duration) {
	if p != nil && p.est != nil {
		p.est.AddRTT(d)
	}
}

// sampleMinRTT feeds a connection's minimum RTT (TCP_INFO's, over all the
// round trips it timed) to the path's windowed minimum.
func (p *Path) sampleMinRTT(d time.Duration) {
	if p != nil && p.est != nil {
		p.est.AddMinRTT(d)
	}
}

// sampleTransfer feeds a response body's delivery to the path's
// estimates: bytes over d, while the path delivered pathBytes in all.
func (p *Path) sampleTransfer(bytes, pathBytes int64, d time.Duration) {
	if p != nil && p.est != nil {
		p.est.AddTransfer(bytes, pathBytes, d)
	}
}

// sampleCeiling feeds what a path that lost a race showed (see
// estimate.Path.AddCeiling) to its estimates.
func (p *Path) sampleCeiling(bytes int64, d time.Duration) {
	if p != nil && p.est != nil {
		p.est.AddCeiling(bytes, d)
	}
}

// sampleFirstFlight feeds the first flight of a response body larger
// than one (see estimate.Path.AddFirstFlight) to the path's estimates.
func (p *Path) sampleFirstFlight(bytes, pathBytes int64, d, gap time.Duration) {
	if p != nil && p.est != nil {
		p.est.AddFirstFlight(bytes, pathBytes, d, gap)
	}
}

// delivered counts n bytes read from the path's connections and returns
// the count so far (0 for a path without estimates).
func (p *Path) delivered(n int64) int64 {
	if p == nil || p.est == nil {
		return 0
	}
	return p.est.Delivered(n)
}

// sampleDelivery feeds bytes delivered over d to the path's estimates.
func (p *Path) sampleDelivery(bytes int64, d time.Duration) {
	if p != nil && p.est != nil {
		p.est.AddDelivery(bytes, d)
	}
}

func (p *Path) addPending(delta int64) {
	if p != nil && p.est != nil && delta != 0 {
		p.est.AddPending(delta)
	}
}

func (p *Path) addActive(delta int) {
	if p != nil && p.est != nil {
		p.est.AddActive(delta)
	}
}
