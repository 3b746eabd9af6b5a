package sockopt

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// BindAddressNoPort sets IP_BIND_ADDRESS_NO_PORT: a socket bound to a
// source address gets its port at connect(), from the whole 4-tuple, not
// at bind(), where the kernel must find a port free for every destination.
// Binding then costs less, and many connections from one address do not
// run out of ports as early.
func BindAddressNoPort(c syscall.RawConn) error {
	return setInt(c, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1, "setsockopt IP_BIND_ADDRESS_NO_PORT")
}

// setInt sets an integer socket option of c; name says which, in an error.
func setInt(c syscall.RawConn, level, opt, value int, name string) error {
	var err error
	if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), level, opt, value) }); cerr != nil {
		return cerr
	}
	return os.NewSyscallError(name, err)
}
