//go:build !linux

package proxy

import (
	"net"
	"net/netip"
)

const originalDstSupported = false

func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, ErrTransparentUnsupported
}
