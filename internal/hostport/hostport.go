// Package hostport splits the "host:port" strings of dials and proxy
// requests, for the Dialer and the proxy alike.
package hostport

import (
	"context"
	"errors"
	"net"
	"strings"
)

// ErrMissingPort says that an address had no port and no default.
var ErrMissingPort = errors.New("missing port in address")

// Split splits hostport ("host:port", "[v6]:port", or a bare host or
// bracketed literal, which take def) into its host, without brackets,
// and its port: a number, or a service name looked up for network ("tcp",
// "udp", ...) as net.Dial does. The host comes back even with an error,
// for callers that want only it. A bare host with def 0 is
// ErrMissingPort.
func Split(ctx context.Context, network, hostport string, def uint16) (string, uint16, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
		if strings.Count(hostport, ":") > 1 && !strings.HasPrefix(hostport, "[") || strings.Contains(host, "]") {
			return host, 0, err // an unbracketed v6 literal with a port, or worse
		}
		if def == 0 {
			return host, 0, &net.AddrError{Err: ErrMissingPort.Error(), Addr: hostport}
		}
		return host, def, nil
	}
	port, err := net.DefaultResolver.LookupPort(ctx, network, p)
	if err != nil {
		return host, 0, err
	}
	return host, uint16(port), nil
}
