package sockopt

import (
	"os"

	"golang.org/x/sys/unix"
)

// Darwin: IP_BOUND_IF / IPV6_BOUND_IF take the interface index.
func bindToInterface(fd uintptr, ifindex int, _ string, v6 bool) error {
	if v6 {
		return os.NewSyscallError("setsockopt IPV6_BOUND_IF", unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_BOUND_IF, ifindex))
	}
	return os.NewSyscallError("setsockopt IP_BOUND_IF", unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BOUND_IF, ifindex))
}
