// Package sockopt holds the per-OS socket options that steer a socket onto
// one interface.
package sockopt

import (
	"net"
	"syscall"
)

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

// IdleState is what Peek found on an idle connection's socket.
type IdleState int

const (
	// Quiet: open, nothing to read.
	Quiet IdleState = iota
	// Unread: open, with bytes nobody asked for (a server's goodbye before
	// it closes, say).
	Unread
	// Closed: the peer closed it, or it failed.
	Closed
)

// IsMPTCP reports whether c, or the connection it wraps (through NetConn
// methods, as *tls.Conn and the Dialer's connections have), runs
// Multipath TCP: a getsockopt.
func IsMPTCP(c net.Conn) bool {
	for {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	m, err := tc.MultipathTCP()
	return err == nil && m
}
