package dnsclient

import (
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// TTL is a record's TTL as a duration: RFC 2181 §8 has a TTL with the top
// bit set count as 0.
func TTL(v uint32) time.Duration {
	if v >= 1<<31 {
		return 0
	}
	return time.Duration(v) * time.Second
}

// MaxNegativeTTL caps negative caching (RFC 2308 suggests 1-3 hours; a
// mobile host's view changes sooner).
const MaxNegativeTTL = 5 * time.Minute

// Extract follows the CNAME chain from name and returns the addresses of
// type qtype at its end, with the smallest TTL on the way; for an empty
// answer, the negative TTL from the SOA (none without one), at most
// MaxNegativeTTL.
func Extract(reply *dns.Msg, name string, qtype uint16) ([]netip.Addr, time.Duration) {
	target := strings.ToLower(name)
	minTTL := time.Duration(1<<63 - 1)
	// A chain is at most as long as the answer section.
	for range len(reply.Answer) + 1 {
		next := ""
		for _, rr := range reply.Answer {
			if h := rr.Header(); h.Class == dns.ClassINET && strings.EqualFold(h.Name, target) {
				if cn, ok := rr.(*dns.CNAME); ok {
					next = strings.ToLower(cn.Target)
					minTTL = min(minTTL, TTL(h.Ttl))
				}
			}
		}
		if next == "" {
			break
		}
		target = next
	}
	var addrs []netip.Addr
	for _, rr := range reply.Answer {
		h := rr.Header()
		if !strings.EqualFold(h.Name, target) || h.Rrtype != qtype || h.Class != dns.ClassINET {
			continue // another name, type, or class (CH, HS: no Internet address)
		}
		var ip net.IP
		switch v := rr.(type) {
		case *dns.A:
			ip = v.A
		case *dns.AAAA:
			ip = v.AAAA
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			if qtype == dns.TypeA {
				a = a.Unmap()
			}
			addrs = append(addrs, a)
			minTTL = min(minTTL, TTL(h.Ttl))
		}
	}
	if len(addrs) > 0 {
		return addrs, minTTL
	}
	for _, rr := range reply.Ns {
		if soa, ok := rr.(*dns.SOA); ok && soa.Hdr.Class == dns.ClassINET {
			return nil, min(TTL(soa.Hdr.Ttl), TTL(soa.Minttl), MaxNegativeTTL)
		}
	}
	return nil, 0
}
