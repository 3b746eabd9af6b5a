package sockopt

import (
	"encoding/binary"
	"os"

	"golang.org/x/sys/windows"
)

// From ws2ipdef.h; golang.org/x/sys/windows does not name them.
const (
	ipUnicastIf   = 31
	ipv6UnicastIf = 31
)

// Windows: IP_UNICAST_IF takes the index in network byte order,
// IPV6_UNICAST_IF in host byte order.
func bindToInterface(fd uintptr, ifindex int, _ string, v6 bool) error {
	h := windows.Handle(fd)
	if v6 {
		return os.NewSyscallError("setsockopt IPV6_UNICAST_IF", windows.SetsockoptInt(h, windows.IPPROTO_IPV6, ipv6UnicastIf, ifindex))
	}
	var be [4]byte
	binary.BigEndian.PutUint32(be[:], uint32(ifindex))
	return os.NewSyscallError("setsockopt IP_UNICAST_IF", windows.SetsockoptInt(h, windows.IPPROTO_IP, ipUnicastIf, int(binary.NativeEndian.Uint32(be[:]))))
}
