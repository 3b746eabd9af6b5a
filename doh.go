package intents

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// parseHTTPSServer parses an https URL whose host is an address, or a
// name followed by "#ADDR" or "#ADDR:PORT" (the URL's port, else 443, by
// default).
func parseHTTPSServer(s string) (EncryptedDNS, error) {
	raw, bootstrap, _ := strings.Cut(s, "#")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return EncryptedDNS{}, fmt.Errorf("bad DNS-over-HTTPS server %q: want an https URL", s)
	}
	port := uint16(443)
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return EncryptedDNS{}, fmt.Errorf("bad DNS-over-HTTPS server %q: port %q", s, p)
		}
		port = uint16(n)
	}
	if bootstrap == "" {
		bootstrap = u.Hostname()
	}
	ap, err := netip.ParseAddrPort(bootstrap)
	if err != nil {
		a, aerr := netip.ParseAddr(bootstrap)
		if aerr != nil {
			return EncryptedDNS{}, fmt.Errorf("bad DNS-over-HTTPS server %q: a host name needs #ADDR, the address to reach it at", s)
		}
		ap = netip.AddrPortFrom(a.WithZone(""), port)
	}
	if ap.Port() == 0 {
		return EncryptedDNS{}, fmt.Errorf("bad DNS-over-HTTPS server %q: port 0", s)
	}
	return EncryptedDNS{URL: raw, Addr: ap}, nil
}
