package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultPorts are the ports a Server forwards to and tunnels to when its
// Ports are nil: the web's, and 8080 for the many HTTP services on it.
var DefaultPorts = []uint16{80, 443, 8080}

// Errors of the destination policy, each a refusal's reason.
var (
	// errLoop is a destination that is one of the proxy's own listeners.
	errLoop = errors.New("the destination is this proxy itself")
	// ErrLocalDestination is a destination on the proxy's own host (a
	// loopback or unspecified address, one of its interfaces' addresses,
	// localhost), refused unless Server.AllowLocal: a client must not
	// reach through the proxy the services that listen only for the host.
	ErrLocalDestination = errors.New("the destination is on the proxy's own host")
)

// PortError is a destination port outside the Server's Ports.
type PortError struct{ Port uint16 }

func (e *PortError) Error() string { return fmt.Sprintf("port %d is not allowed", e.Port) }

// checkDestination applies the destination policy to host:port, a
// forwarded request's or a tunnel's: never one of the proxy's listeners,
// nothing on its own host unless AllowLocal, only the allowed ports. The
// status is the HTTP answer to a refusal.
func (s *Server) checkDestination(host string, port uint16) (int, error) {
	switch {
	case s.isSelf(host, port):
		return http.StatusLoopDetected, errLoop
	case !s.AllowLocal && isLocalName(host):
		return http.StatusForbidden, ErrLocalDestination
	case !s.portAllowed(port):
		return http.StatusForbidden, &PortError{port}
	}
	return 0, nil
}

// portAllowed reports whether the proxy may reach port.
func (s *Server) portAllowed(port uint16) bool {
	ports := s.Ports
	if ports == nil {
		ports = DefaultPorts
	}
	return s.AnyPort || slices.Contains(ports, port)
}

// isLocalName reports whether host, a name or an address literal, is
// the proxy's own host. A name that merely resolves to it is caught when
// its socket connects (Server.Control).
func isLocalName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") { // RFC 6761 §6.3
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && isLocalAddr(a)
}

// isLocalAddr reports whether a is an address of this host.
func isLocalAddr(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	return a.IsLoopback() || a.IsUnspecified() || hostAddrs.has(a)
}

// hostAddrs are the addresses of this host's interfaces, read again when
// a second has passed: interfaces come and go, and reading them on every
// request costs a netlink dump. No lock is held over the dump: callers
// that find it stale at once may each read it.
var hostAddrs localAddrs

type localAddrs struct{ last atomic.Pointer[addrsRead] }

type addrsRead struct {
	at    time.Time
	addrs []netip.Addr
}

func (l *localAddrs) has(a netip.Addr) bool {
	r := l.last.Load()
	if r == nil || time.Since(r.at) > time.Second {
		r = &addrsRead{at: time.Now()}
		ifas, _ := net.InterfaceAddrs()
		for _, ifa := range ifas {
			if p, err := netip.ParsePrefix(ifa.String()); err == nil {
				r.addrs = append(r.addrs, p.Addr().Unmap())
			}
		}
		l.last.Store(r)
	}
	return slices.Contains(r.addrs, a)
}

// Control refuses a socket's connection to the proxy's own host (unless
// AllowLocal) or to one of its listeners, as a net.Dialer's Control
// function: set it on the Dialer of the Server and of its Transport, so
// that a name that resolves to the host is refused too, not only one
// given as an address.
func (s *Server) Control(network, address string, _ syscall.RawConn) error {
	s.init()
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil // not an IP socket
	}
	ap = netip.AddrPortFrom(ap.Addr().WithZone("").Unmap(), ap.Port())
	if s.isListener(ap) {
		return errLoop
	}
	if !s.AllowLocal && isLocalAddr(ap.Addr()) {
		return ErrLocalDestination
	}
	return nil
}
