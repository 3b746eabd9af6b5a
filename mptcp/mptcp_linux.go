package mptcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sockintents/intents/internal/sockopt"
)

// getsockopt names at SOL_MPTCP (linux/mptcp.h).
const (
	optInfo         = 1 // MPTCP_INFO
	optSubflowAddrs = 3 // MPTCP_SUBFLOW_ADDRS
)

var supported = sync.OnceValue(func() error {
	b, err := os.ReadFile("/proc/sys/net/mptcp/enabled")
	if err != nil {
		return fmt.Errorf("mptcp: kernel without MPTCP (%v): %w", err, errors.ErrUnsupported)
	}
	if strings.TrimSpace(string(b)) != "1" {
		return fmt.Errorf("mptcp: disabled (sysctl net.mptcp.enabled=%s): %w", strings.TrimSpace(string(b)), errors.ErrUnsupported)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP)
	if err != nil {
		return fmt.Errorf("mptcp: no MPTCP socket (%v): %w", err, errors.ErrUnsupported)
	}
	unix.Close(fd)
	return nil
})

// Supported returns nil if MPTCP sockets can be made here, else why not
// (matching errors.ErrUnsupported). It probes once, in this process's
// network namespace at the first call.
func Supported() error { return supported() }

// ErrFallback is returned for a connection that asked for MPTCP and got
// plain TCP: the peer does not speak it, or something on the way stripped
// its options.
var ErrFallback = errors.New("mptcp: the connection fell back to TCP")

// Is reports whether c runs MPTCP now: an MPTCP socket whose handshake did
// not fall back to TCP.
func Is(c syscall.Conn) (bool, error) {
	_, err := ConnInfo(c)
	if errors.Is(err, ErrFallback) {
		return false, nil
	}
	return err == nil, err
}

// ConnInfo reads MPTCP_INFO and the subflows' addresses of c. A socket
// that is not MPTCP gives an error; one that fell back to TCP, ErrFallback.
func ConnInfo(c syscall.Conn) (Info, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Info{}, err
	}
	var info Info
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		info, opErr = connInfo(int(fd))
	}); err != nil {
		return Info{}, err
	}
	return info, opErr
}

func connInfo(fd int) (Info, error) {
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return Info{}, os.NewSyscallError("getsockopt SO_PROTOCOL", err)
	}
	if proto != unix.IPPROTO_MPTCP {
		return Info{}, errors.New("mptcp: not an MPTCP socket")
	}
	buf := make([]byte, 256)
	n, err := sockopt.Getsockopt(uintptr(fd), unix.SOL_MPTCP, optInfo, buf)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOPROTOOPT) {
		// A fallen-back socket is a TCP socket underneath: Linux 5.16+ says
		// EOPNOTSUPP, older kernels ENOPROTOOPT.
		return Info{}, ErrFallback
	}
	if err != nil {
		return Info{}, os.NewSyscallError("getsockopt MPTCP_INFO", err)
	}
	info, err := parseInfo(buf[:n])
	if err != nil {
		return Info{}, err
	}
	if addrs, err := subflowAddrs(fd); err == nil {
		info.SubflowAddrs = addrs
	}
	return info, nil
}

// parseInfo reads struct mptcp_info: subflows at 0; the byte counters,
// added in Linux 6.x, at 48, 56 and 64 when the kernel wrote that far.
func parseInfo(b []byte) (Info, error) {
	if len(b) < 1 {
		return Info{}, errors.New("mptcp: short MPTCP_INFO")
	}
	info := Info{Subflows: int(b[0])}
	u64 := func(off int) uint64 {
		if len(b) >= off+8 {
			return binary.NativeEndian.Uint64(b[off:])
		}
		return 0
	}
	info.BytesRetrans, info.BytesSent, info.BytesReceived = u64(48), u64(56), u64(64)
	return info, nil
}

// Sizes of struct mptcp_subflow_data and struct mptcp_subflow_addrs (two
// sockaddr_storage).
const (
	subflowDataSize  = 16
	subflowAddrsSize = 2 * 128
	maxSubflows      = 8
)

func subflowAddrs(fd int) ([]AddrPair, error) {
	buf := make([]byte, subflowDataSize+maxSubflows*subflowAddrsSize)
	binary.NativeEndian.PutUint32(buf[0:], subflowDataSize)   // size_subflow_data
	binary.NativeEndian.PutUint32(buf[12:], subflowAddrsSize) // size_user
	n, err := sockopt.Getsockopt(uintptr(fd), unix.SOL_MPTCP, optSubflowAddrs, buf)
	if err != nil {
		return nil, os.NewSyscallError("getsockopt MPTCP_SUBFLOW_ADDRS", err)
	}
	return parseSubflowAddrs(buf[:n])
}

// parseSubflowAddrs reads struct mptcp_subflow_data and the entries after it.
func parseSubflowAddrs(b []byte) ([]AddrPair, error) {
	if len(b) < subflowDataSize {
		return nil, errors.New("mptcp: short MPTCP_SUBFLOW_ADDRS")
	}
	hdr := int(binary.NativeEndian.Uint32(b[0:]))
	num := int(binary.NativeEndian.Uint32(b[4:]))
	size := int(binary.NativeEndian.Uint32(b[12:]))
	if hdr < subflowDataSize || size <= 0 || num < 0 || hdr > len(b) {
		return nil, errors.New("mptcp: malformed MPTCP_SUBFLOW_ADDRS")
	}
	var out []AddrPair
	for i := 0; i < num; i++ {
		off := hdr + i*size
		if off+subflowAddrsSize > len(b) || size < subflowAddrsSize {
			break // the kernel had more than the buffer held
		}
		local, ok1 := sockopt.ParseSockaddr(b[off : off+128])
		remote, ok2 := sockopt.ParseSockaddr(b[off+128 : off+256])
		if ok1 && ok2 {
			out = append(out, AddrPair{local, remote})
		}
	}
	return out, nil
}
