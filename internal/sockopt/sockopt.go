// Package sockopt holds the per-OS socket options that steer a socket onto
// one interface.
package sockopt

import "syscall"

// BindToInterface makes the socket behind c send through the interface
// (index ifindex, name ifname) whatever the routing table says. v6 says
// whether the socket is IPv6. Where the OS has no such option it returns
// errors.ErrUnsupported and the caller binds the source address only.
func BindToInterface(c syscall.RawConn, ifindex int, ifname string, v6 bool) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = bindToInterface(fd, ifindex, ifname, v6)
	}); cerr != nil {
		return cerr
	}
	return err
}
