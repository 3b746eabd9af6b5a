package tcpinfo

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Get reads TCP_INFO of the socket behind c.
func Get(c syscall.RawConn) (Info, error) {
	var ti *unix.TCPInfo
	var unread int
	var err error
	if cerr := c.Control(func(fd uintptr) {
		ti, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			unread, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		}
	}); cerr != nil {
		return Info{}, cerr
	}
	if err != nil {
		return Info{}, err
	}
	return Info{
		RTT:         time.Duration(ti.Rtt) * time.Microsecond,
		RTTVar:      time.Duration(ti.Rttvar) * time.Microsecond,
		MinRTT:      time.Duration(ti.Min_rtt) * time.Microsecond,
		Lost:        uint64(ti.Lost),
		Retrans:     uint64(ti.Total_retrans),
		DataSegsOut: uint64(ti.Data_segs_out),

		LastDataRecv: time.Duration(ti.Last_data_recv) * time.Millisecond,
		LastDataSent: time.Duration(ti.Last_data_sent) * time.Millisecond,
		LastAckRecv:  time.Duration(ti.Last_ack_recv) * time.Millisecond,
		Unacked:      uint64(ti.Unacked),
		Timeouts:     int(ti.Retransmits),
		Unread:       unread,
	}, nil
}
