package proxy

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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
	size := uint32(len(buf))
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), unix.SO_ORIGINAL_DST,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if errno != 0 {
		return netip.AddrPort{}, errno
	}
	port := binary.BigEndian.Uint16(buf[2:4])
	switch binary.NativeEndian.Uint16(buf[0:2]) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])).Unmap(), port), nil
	}
	return netip.AddrPort{}, errors.New("original destination of an unknown family")
}
