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
}
