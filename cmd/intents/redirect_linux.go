package main

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// cgroupPrefix names the cgroups of `run -transparent`, and tablePrefix
// its nftables tables, each with the PID of the intents process that
// made it.
const (
	cgroupPrefix = "intents-run-"
	tablePrefix  = "intents_run_"
)

// redirection sends the TCP connections of the processes in a cgroup of
// its own to the transparent listeners: each family's connections to
// anywhere but loopback. Nothing else of the host's traffic matches.
// Rules and cgroup are removed when the program ends, or when intents is
// interrupted or terminated; a killed intents leaves them behind, inert
// (they match the sockets of its cgroup alone), for the next `run
// -transparent` to remove.
type redirection struct {
	dir string // the cgroup
	fd  int    // the cgroup, open, for a child to start in
	nft *nftables.Conn
}

// redirect makes the cgroup and the rules that send its TCP connections
// to v4 and v6 (the listeners' addresses; an invalid one: that family
// goes direct). It needs root or CAP_NET_ADMIN, and cgroup2.
func redirect(v4, v6 netip.AddrPort) (_ *redirection, err error) {
	root, err := cgroup2Root()
	if err != nil {
		return nil, err
	}
	r := &redirection{dir: filepath.Join(root, cgroupPrefix+strconv.Itoa(os.Getpid())), fd: -1}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if err := os.Mkdir(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("a cgroup for the program: %w", err)
	}
	if r.fd, err = unix.Open(r.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil {
		return nil, err
	}
	if r.nft, err = nftables.New(nftables.AsLasting()); err != nil {
		return nil, err
	}
	removeStale(r.nft, root)
	name := tablePrefix + strconv.Itoa(os.Getpid())
	for _, to := range []netip.AddrPort{v4, v6} {
		if to.IsValid() {
			addRedirect(r.nft, name, st.Ino, to)
		}
	}
	if err := r.nft.Flush(); err != nil {
		return nil, fmt.Errorf("nftables rules for the program: %w", err)
	}
	return r, nil
}

// addRedirect adds, in a table of to's family bound to c's socket, the
// rule: a TCP connection from a socket of cgroup (its ID, level 1) to
// anywhere but loopback goes to to's port on loopback.
func addRedirect(c *nftables.Conn, name string, cgroup uint64, to netip.AddrPort) {
	family := nftables.TableFamilyIPv4
	// The destination: not in 127.0.0.0/8 (its first byte), not ::1.
	notLoopback := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127}},
	}
	if to.Addr().Is6() {
		family = nftables.TableFamilyIPv6
		notLoopback = []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: netip.IPv6Loopback().AsSlice()},
		}
	}
	t := c.AddTable(&nftables.Table{Name: name, Family: family})
	ch := c.AddChain(&nftables.Chain{Name: "out", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Socket{Key: expr.SocketKeyCgroupv2, Level: 1, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint64(cgroup)},
	}
	exprs = append(append(exprs, notLoopback...),
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(to.Port())},
		&expr.Redir{RegisterProtoMin: 1})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
}

// prepare has cmd start in the cgroup, and die with intents: a program
// left running after intents was killed would find its connections
// redirected to a listener no longer there.
func (r *redirection) prepare(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: r.fd, Pdeathsig: syscall.SIGKILL}
}

// close removes the rules and the cgroup (which stays while a process the
// program left behind is in it).
func (r *redirection) close() error {
	var errs []error
	if r.nft != nil {
		name := tablePrefix + strconv.Itoa(os.Getpid())
		for _, family := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
			r.nft.DelTable(&nftables.Table{Name: name, Family: family})
		}
		if err := r.nft.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
		errs = append(errs, r.nft.CloseLasting())
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
	}
	if err := os.Remove(r.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cgroup2Root is where the cgroup2 hierarchy is mounted: /sys/fs/cgroup,
// or /sys/fs/cgroup/unified beside cgroup v1.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE ...
		before, after, ok := strings.Cut(sc.Text(), " - ")
		if f := strings.Fields(before); ok && len(f) >= 5 && strings.HasPrefix(after, "cgroup2 ") {
			return f[4], nil
		}
	}
	// ip netns exec, for one, mounts a /sys of its own, without cgroups.
	return "", errors.New("no cgroup2 hierarchy mounted (mount one: mount -t cgroup2 none /sys/fs/cgroup)")
}

// removeStale removes the tables and the empty cgroups that intents
// processes no longer running left (killed before they could).
func removeStale(c *nftables.Conn, root string) {
	gone := func(name, prefix string) bool {
		pid, err := strconv.Atoi(strings.TrimPrefix(name, prefix))
		return strings.HasPrefix(name, prefix) && err == nil && unix.Kill(pid, 0) == unix.ESRCH
	}
	tables, _ := c.ListTables()
	for _, t := range tables {
		if gone(t.Name, tablePrefix) {
			c.DelTable(t)
		}
	}
	c.Flush()
	dirs, _ := filepath.Glob(filepath.Join(root, cgroupPrefix+"*"))
	for _, dir := range dirs {
		if gone(filepath.Base(dir), cgroupPrefix) {
			os.Remove(dir) // fails, as it should, while a process is in it
		}
	}
}
