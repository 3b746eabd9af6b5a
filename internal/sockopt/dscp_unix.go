//go:build unix

package sockopt

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// SetDSCP marks the socket's packets with the DSCP (IP_TOS for IPv4,
// IPV6_TCLASS for IPv6; the ECN bits stay zero).
func SetDSCP(c syscall.RawConn, dscp int, v6 bool) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		if v6 {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, dscp<<2)
		} else {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, dscp<<2)
		}
	}); cerr != nil {
		return cerr
	}
	return os.NewSyscallError("setsockopt DSCP", err)
}
