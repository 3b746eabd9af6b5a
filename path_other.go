//go:build !linux

package intents

import (
	"errors"
	"net"
)

// classify uses name hints only: outside Linux there is no portable way to
// tell Wi-Fi from a wire, so such links are TypeOther (configure Type).
func classify(ifi net.Interface) InterfaceType {
	if t, ok := classifyByName(ifi); ok {
		return t
	}
	return TypeOther
}

// linkDNS has no per-link source outside Linux; resolv.conf or the
// configuration is used.
func linkDNS(int) (linkResolver, bool) { return linkResolver{}, false }

// watchInterfaces is not implemented outside Linux; call Manager.Refresh.
func watchInterfaces(func()) (func() error, error) { return nil, errors.ErrUnsupported }

// ifaceRxBytes has no portable source outside Linux; only the library's own
// transfers are counted.
func ifaceRxBytes(string) (int64, bool) { return 0, false }

// gatewayHardwareAddr has no portable source outside Linux: a network is
// told by its prefixes and DNS servers alone.
func gatewayHardwareAddr(string) string { return "" }
