package proxy

import (
	"errors"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sockintents/intents/internal/sockopt"
)

const originalDstSupported = true

// originalDst is where c, a connection a packet filter redirected, was
// going (SO_ORIGINAL_DST; IP6T_SO_ORIGINAL_DST, the same number, for
// IPv6).
func originalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	level := unix.SOL_IP
	if !local.Addr().Unmap().Is4() {
		level = unix.SOL_IPV6
	}
	var buf [unix.SizeofSockaddrInet6]byte
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		_, gerr = sockopt.Getsockopt(fd, level, unix.SO_ORIGINAL_DST, buf[:])
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if gerr != nil {
		return netip.AddrPort{}, gerr
	}
	if dst, ok := sockopt.ParseSockaddr(buf[:]); ok {
		return netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()), nil
	}
	return netip.AddrPort{}, errors.New("original destination of an unknown family")
}
