package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// A PACRoute sends the destinations it matches to one of the proxy's
// listeners, in the proxy auto-config (PAC) file the Server serves: a
// browser can then give each kind of traffic the intents of the listener
// it goes to.
type PACRoute struct {
	// Host or Prefix match as in Rule. A prefix matches only destinations
	// given as IPv4 addresses: PAC's isInNet knows no other.
	Host   string
	Prefix netip.Prefix
	// Proxy is the listener's address, host:port.
	Proxy string
}

// The PAC file's keywords for each kind of listener.
const (
	pacProxy = "PROXY"
	pacHTTPS = "HTTPS"
	pacSOCKS = "SOCKS5"
)

// PACPath is where a Server serves its PAC file, to a plain GET (not a
// proxy request) on any of its HTTP listeners.
const PACPath = "/proxy.pac"

// servePAC writes the PAC file: the routes in order, then the listener
// the file was fetched from for everything else.
func (s *Server) servePAC(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	b.WriteString("function FindProxyForURL(url, host) {\n")
	for _, rt := range s.PAC {
		if cond := pacCondition(rt); cond != "" {
			fmt.Fprintf(&b, "\tif (%s) return %q;\n", cond, s.listenerKind(rt.Proxy)+" "+rt.Proxy)
		}
	}
	// The address the client reached this listener at: the server's own
	// view, not the Host header the client sent.
	self := r.Host
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		self = a.String()
	}
	kind := pacProxy
	if r.TLS != nil {
		kind = pacHTTPS
	}
	fmt.Fprintf(&b, "\treturn %q;\n}\n", kind+" "+self)
	w.Header().Set("Content-Type", "application/x-ns-proxy-autoconfig")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write([]byte(b.String()))
}

// listenerKind is the PAC keyword of the server's listener at addr:
// PROXY if it is none of them.
func (s *Server) listenerKind(addr string) string {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	for l, kind := range s.listeners {
		if l.Addr().String() == addr && kind != "" {
			return kind
		}
	}
	return pacProxy
}

// pacCondition is the JavaScript test of a route; "" for one PAC cannot
// express. Host patterns hold only name characters (checkHostPattern),
// nothing a string literal must escape.
func pacCondition(rt PACRoute) string {
	if rt.Prefix.IsValid() {
		if !rt.Prefix.Addr().Is4() {
			return ""
		}
		mask := net.CIDRMask(rt.Prefix.Bits(), 32)
		return fmt.Sprintf("isInNet(host, %q, %q)", rt.Prefix.Addr().String(), net.IP(mask).String())
	}
	if checkHostPattern(rt.Host) != nil {
		return ""
	}
	switch pat := strings.ToLower(rt.Host); {
	case pat == "*":
		return "true"
	case strings.HasPrefix(pat, "*."):
		return fmt.Sprintf("dnsDomainIs(host.toLowerCase(), %q)", pat[1:])
	default:
		return fmt.Sprintf("host.toLowerCase() == %q", pat)
	}
}
