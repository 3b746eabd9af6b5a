package sockopt

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpiOptSynData is TCPI_OPT_SYN_DATA (linux/tcp.h): data went in the SYN.
const tcpiOptSynData = 32

// FastOpenConnect sets TCP_FASTOPEN_CONNECT: connect() returns at once and
// the first write goes in the SYN when the kernel holds a cookie for the
// server (from an earlier connection), saving a round trip.
func FastOpenConnect(c syscall.RawConn) error {
	return setInt(c, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1, "setsockopt TCP_FASTOPEN_CONNECT")
}

// SentSYNData reports whether data went in the connection's SYN.
func SentSYNData(c syscall.RawConn) (bool, error) {
	var info *unix.TCPInfo
	var err error
	if cerr := c.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); cerr != nil {
		return false, cerr
	}
	if err != nil {
		return false, os.NewSyscallError("getsockopt TCP_INFO", err)
	}
	return info.Options&tcpiOptSynData != 0, nil
}
