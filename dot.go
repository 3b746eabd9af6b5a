package intents

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// EncryptedDNS is a path's encrypted name server: DNS over TLS (RFC
// 7858), or over HTTPS (RFC 8484) where URL is set.
type EncryptedDNS struct {
	Addr netip.AddrPort // where to connect: no lookup is made for a name
	// Name is the name a DNS-over-TLS server's certificate must show
	// (empty: its address must); over HTTPS, the URL's host is.
	Name string
	URL  string // DNS over HTTPS: where queries are POSTed
}

// String is the server as PathConfig names it: ADDR[#NAME] over TLS,
// URL#ADDR over HTTPS.
func (s EncryptedDNS) String() string {
	switch {
	case s.URL != "":
		return s.URL + "#" + s.Addr.String()
	case s.Name == "":
		return s.Addr.String()
	}
	return s.Addr.String() + "#" + s.Name
}

// parseTLSServer parses "ADDR" or "ADDR:PORT" (port 853 by default),
// either followed by "#NAME".
func parseTLSServer(s string) (EncryptedDNS, error) {
	addr, name, _ := strings.Cut(s, "#")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		a, aerr := netip.ParseAddr(addr)
		if aerr != nil {
			return EncryptedDNS{}, fmt.Errorf("bad DNS-over-TLS server %q: want ADDR, ADDR:PORT, either with #NAME", s)
		}
		ap = netip.AddrPortFrom(a.WithZone(""), 853)
	}
	if ap.Port() == 0 {
		return EncryptedDNS{}, fmt.Errorf("bad DNS-over-TLS server %q: port 0", s)
	}
	if _, err := netip.ParseAddr(name); name != "" && err != nil && !isDomainName(name) {
		return EncryptedDNS{}, fmt.Errorf("bad DNS-over-TLS server %q: %q is no name a certificate can show", s, name)
	}
	return EncryptedDNS{Addr: ap, Name: name}, nil
}

// errNoPlaintext says why a path with encrypted DNS servers was not asked
// in plaintext.
var errNoPlaintext = errors.New("its encrypted DNS servers failed, and PathConfig.DNSPlaintextFallback is not set")
