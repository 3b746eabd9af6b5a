package intents

import (
	"bufio"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// sysfsRoot is where classify looks; tests point it elsewhere.
var sysfsRoot = "/sys/class/net"

// resolvedNetif is systemd-resolved's per-link state directory.
var resolvedNetif = "/run/systemd/resolve/netif"

// classify decides a link's type from sysfs: a wireless directory or phy80211
// link means Wi-Fi, DEVTYPE=wwan cellular, a device link a physical wire;
// virtual links (veth, bridges, tunnels) are TypeOther.
func classify(ifi net.Interface) InterfaceType {
	if t, ok := classifyByName(ifi); ok {
		return t
	}
	dir := filepath.Join(sysfsRoot, ifi.Name)
	if exists(filepath.Join(dir, "wireless")) || exists(filepath.Join(dir, "phy80211")) {
		return TypeWifi
	}
	if b, err := os.ReadFile(filepath.Join(dir, "uevent")); err == nil {
		for line := range strings.Lines(string(b)) {
			switch strings.TrimSpace(line) {
			case "DEVTYPE=wwan":
				return TypeCellular
			case "DEVTYPE=wlan":
				return TypeWifi
			}
		}
	}
	if exists(filepath.Join(dir, "device")) {
		return TypeWired
	}
	return TypeOther
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// inInitNetns reports whether this process shares the network namespace of
// PID 1, the only one systemd-resolved's per-link state describes. When it
// cannot tell (no permission to look), it assumes so.
var inInitNetns = sync.OnceValue(func() bool {
	self, err1 := os.Readlink("/proc/self/ns/net")
	init, err2 := os.Readlink("/proc/1/ns/net")
	return err1 != nil || err2 != nil || self == init
})

// linkDNS reads systemd-resolved's per-link servers, domains and DNS over
// TLS mode. In another network namespace interface indexes mean other
// links, so it reads nothing.
func linkDNS(ifindex int) (lr linkResolver, ok bool) {
	if !inInitNetns() {
		return lr, false
	}
	f, err := os.Open(filepath.Join(resolvedNetif, strconv.Itoa(ifindex)))
	if err != nil {
		return lr, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "SERVERS":
			for _, s := range strings.Fields(v) {
				addr, name, _ := strings.Cut(s, "#") // the DoT server name
				ap, err := parseServer(addr)
				if err != nil {
					continue
				}
				lr.servers = append(lr.servers, ap)
				// Over TLS: the port given, else 853 (as resolved does).
				if _, perr := netip.ParseAddrPort(addr); perr != nil {
					ap = netip.AddrPortFrom(ap.Addr(), 853)
				}
				lr.tls = append(lr.tls, EncryptedDNS{Addr: ap, Name: name})
			}
		case "DOMAINS":
			for _, d := range strings.Fields(v) {
				if !strings.HasPrefix(d, "~") { // routing-only domains are not search domains
					lr.search = append(lr.search, d)
				}
			}
		case "DNS_OVER_TLS":
			lr.dotMode = v
		}
	}
	lr.search = trimDots(lr.search)
	return lr, len(lr.servers) > 0
}

// For tests: a small receive buffer forces overflows, which are counted
// and reported.
var (
	watchRcvBuf     int
	watchOverflows  atomic.Int64
	onWatchOverflow func()
)

func overflowed() {
	watchOverflows.Add(1)
	if onWatchOverflow != nil {
		onWatchOverflow()
	}
}

// watchInterfaces calls onChange after link and address events until the
// returned stop function is called. Events are read from an rtnetlink socket;
// a burst of events gives one call, and an overflowed socket (ENOBUFS, events
// lost) also gives one, since onChange re-lists everything.
func watchInterfaces(onChange func()) (stop func() error, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK,
		Groups: unix.RTMGRP_LINK | unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR}
	if watchRcvBuf > 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, watchRcvBuf)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	// A non-blocking fd given to os.NewFile joins the runtime poller, so
	// Close unblocks a pending Read.
	f := os.NewFile(uintptr(fd), "rtnetlink")
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			_, err := f.Read(buf)
			if errors.Is(err, unix.ENOBUFS) {
				overflowed()
			} else if err != nil {
				return // closed
			}
			// Drain what is already queued, then re-list once.
			_ = f.SetReadDeadline(time.Now())
			for {
				if _, err := f.Read(buf); errors.Is(err, unix.ENOBUFS) {
					overflowed()
				} else if err != nil {
					break
				}
			}
			_ = f.SetReadDeadline(time.Time{})
			onChange()
		}
	}()
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			err = f.Close()
			<-done
		})
		return err
	}, nil
}

// ifaceRxBytes reads the interface's received-bytes counter.
func ifaceRxBytes(name string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(sysfsRoot, name, "statistics", "rx_bytes"))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// gatewayHardwareAddr is the link-layer address of the default gateway
// through interface name, from /proc/net/route and the neighbour table
// (/proc/net/arp), or "" if it has none known (a point-to-point link).
func gatewayHardwareAddr(name string) string {
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return ""
	}
	var gw string
	for _, line := range strings.Split(string(routes), "\n")[1:] {
		f := strings.Fields(line)
		// Iface Destination Gateway ...: the default route's gateway, in
		// hexadecimal, in the host's byte order (little-endian here).
		if len(f) >= 3 && f[0] == name && f[1] == "00000000" && f[2] != "00000000" {
			b, err := hex.DecodeString(f[2])
			if err != nil || len(b) != 4 {
				return ""
			}
			gw = netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}).String()
			break
		}
	}
	if gw == "" {
		return ""
	}
	arp, err := os.ReadFile("/proc/net/arp")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(arp), "\n")[1:] {
		// IP address, HW type, Flags, HW address, Mask, Device
		if f := strings.Fields(line); len(f) >= 6 && f[0] == gw && f[5] == name {
			return f[3]
		}
	}
	return ""
}
