// Package mptcp makes Linux Multipath TCP observable and controllable:
// whether it is available, whether a connection really got it (or fell
// back to TCP, as behind middleboxes that strip its options), its subflows,
// and the path manager's endpoints and limits (generic netlink "mptcp_pm").
//
// Outside Linux every function returns an error matching
// errors.ErrUnsupported.
package mptcp

import (
	"net/netip"
)

// Flags of a path-manager endpoint (MPTCP_PM_ADDR_FLAG_*).
type Flags uint32

// Endpoint flags.
const (
	Signal   Flags = 1 << iota // announce the address to the peer
	Subflow                    // open subflows from this address
	Backup                     // use subflows from it only when others fail
	Fullmesh                   // a subflow to every peer address
	Implicit                   // created by the kernel, not configured
)

func (f Flags) String() string {
	var s string
	for i, name := range []string{"signal", "subflow", "backup", "fullmesh", "implicit"} {
		if f&(1<<i) != 0 {
			if s != "" {
				s += ","
			}
			s += name
		}
	}
	return s
}

// Endpoint is an address the path manager may use for subflows.
type Endpoint struct {
	ID      uint8 // 0: the kernel picks one
	Addr    netip.Addr
	Port    uint16
	Flags   Flags
	IfIndex int
}

// Limits are the path manager's limits.
type Limits struct {
	Subflows        uint32 // extra subflows per connection
	AddAddrAccepted uint32 // addresses accepted from the peer's ADD_ADDR
}

// Info is what the kernel says of an MPTCP connection.
type Info struct {
	Subflows      int // established subflows besides the first
	BytesSent     uint64
	BytesReceived uint64
	BytesRetrans  uint64
	// SubflowAddrs lists every subflow's addresses, the first one first,
	// where the kernel exposes them (MPTCP_SUBFLOW_ADDRS, Linux 5.16+).
	SubflowAddrs []AddrPair
}

// AddrPair is one subflow's local and remote address.
type AddrPair struct {
	Local, Remote netip.AddrPort
}
