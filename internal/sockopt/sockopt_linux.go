package sockopt

import (
	"os"

	"golang.org/x/sys/unix"
)

// Linux: SO_BINDTODEVICE. Kernels before 5.7 need CAP_NET_RAW for it; they
// say EPERM, which the caller treats as "source address only".
func bindToInterface(fd uintptr, _ int, ifname string, _ bool) error {
	return os.NewSyscallError("setsockopt SO_BINDTODEVICE", unix.BindToDevice(int(fd), ifname))
}
