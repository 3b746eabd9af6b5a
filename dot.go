package intents

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// TLSServer is a path's DNS-over-TLS server (RFC 7858).
type TLSServer struct {
	Addr netip.AddrPort
	// Name is the name the server's certificate must show (empty: its
	// address must).
	Name string
}

func (s TLSServer) String() string {
	if s.Name == "" {
		return s.Addr.String()
	}
	return s.Addr.String() + "#" + s.Name
}

// parseTLSServer parses "ADDR" or "ADDR:PORT" (port 853 by default),
// either followed by "#NAME".
func parseTLSServer(s string) (TLSServer, error) {
	addr, name, _ := strings.Cut(s, "#")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		a, aerr := netip.ParseAddr(addr)
		if aerr != nil {
			return TLSServer{}, fmt.Errorf("bad DNS-over-TLS server %q: want ADDR, ADDR:PORT, either with #NAME", s)
		}
		ap = netip.AddrPortFrom(a.WithZone(""), 853)
	}
	if ap.Port() == 0 {
		return TLSServer{}, fmt.Errorf("bad DNS-over-TLS server %q: port 0", s)
	}
	if _, err := netip.ParseAddr(name); name != "" && err != nil && !isDomainName(name) {
		return TLSServer{}, fmt.Errorf("bad DNS-over-TLS server %q: %q is no name a certificate can show", s, name)
	}
	return TLSServer{Addr: ap, Name: name}, nil
}

// errNoPlaintext says why a path with encrypted DNS servers was not asked
// in plaintext.
var errNoPlaintext = errors.New("its encrypted DNS servers failed, and PathConfig.DNSPlaintextFallback is not set")
