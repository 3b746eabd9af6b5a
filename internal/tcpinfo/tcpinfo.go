// Package tcpinfo reads the kernel's view of a TCP connection (TCP_INFO
// on Linux), for per-path RTT and loss estimates.
package tcpinfo

import "time"

// Info is the part of TCP_INFO the estimators use.
type Info struct {
	RTT, RTTVar, MinRTT time.Duration
	Lost                uint64 // segments currently presumed lost
	Retrans             uint64 // segments retransmitted so far
	DataSegsOut         uint64 // data segments sent so far

	// For telling a silent path from a slow peer or a slow reader.
	LastDataRecv time.Duration // since data last arrived
	LastDataSent time.Duration // since data was last sent
	LastAckRecv  time.Duration // since an acknowledgment last arrived
	Unacked      uint64        // segments sent and not acknowledged
	Timeouts     int           // consecutive retransmission timeouts now
	Unread       int           // bytes received that the application has not read
}
