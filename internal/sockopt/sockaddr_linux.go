package sockopt

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Getsockopt reads the socket option opt at level of the socket fd into
// buf, for the options x/sys has no typed getter for; it returns the
// length the kernel wrote.
func Getsockopt(fd uintptr, level, opt int, buf []byte) (int, error) {
	n := uint32(len(buf))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// ParseSockaddr reads a sockaddr_in or sockaddr_in6 (host-order family,
// network-order port) from b, which holds at least a sockaddr_in6's 28
// bytes.
func ParseSockaddr(b []byte) (netip.AddrPort, bool) {
	if len(b) < unix.SizeofSockaddrInet6 {
		return netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16(b[2:4])
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), true
	}
	return netip.AddrPort{}, false
}
