package sockopt

import (
	"os"

	"golang.org/x/sys/unix"
)

// Linux: SO_BINDTODEVICE. It needs CAP_NET_RAW; without it the kernel says
// EPERM, which the caller treats as "source address only".
func bindToInterface(fd uintptr, _ int, ifname string, _ bool) error {
	return os.NewSyscallError("setsockopt SO_BINDTODEVICE", unix.BindToDevice(int(fd), ifname))
}
