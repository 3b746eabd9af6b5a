package intents

import (
	"cmp"
	"net/netip"

	"github.com/sockintents/intents/mptcp"
)

// The MPTCP endpoints a Manager adds (Config.MPTCPEndpoints) and their
// backup flags. Two locks: Manager.mptcpMu guards the state below, and is
// never held across netlink; Manager.pmMu orders the netlink calls (one
// at a time, each applying the state as it is when it starts), and is
// taken only by them. A dial that must see the flags set waits for its
// own call; MPTCPError and the counts never wait for netlink.

// mptcpUse counts the open MPTCP connections a Manager's Dialers made, by
// mode, to set the backup flag of the endpoints it added.
type mptcpUse struct {
	handover, aggregate int
	firstOn             map[int]int        // handover connections by their first path's index
	owned               map[netip.Addr]int // endpoints this Manager added: address → path index
	backup              map[netip.Addr]bool
}

// MPTCPError says why the last attempt to configure MPTCP endpoints (see
// Config.MPTCPEndpoints) failed, or nil.
func (m *Manager) MPTCPError() error {
	m.mptcpMu.Lock()
	defer m.mptcpMu.Unlock()
	return m.mptcpErr
}

// ensureMPTCPEndpoints adds an endpoint for every up path that lacks one.
func (m *Manager) ensureMPTCPEndpoints() {
	m.pmMu.Lock()
	defer m.pmMu.Unlock()
	addrs := map[netip.Addr]int{}
	for _, p := range m.Paths() {
		if p.Up && p.Type != TypeLoopback {
			for _, a := range p.Addrs {
				addrs[a] = p.Index
			}
		}
	}
	err := func() error {
		pm, err := mptcp.OpenPM()
		if err != nil {
			return err
		}
		defer pm.Close()
		added, err := pm.EnsureEndpoints(addrs, mptcp.Subflow)
		m.mptcpMu.Lock()
		if m.mptcp.owned == nil {
			m.mptcp.owned, m.mptcp.backup, m.mptcp.firstOn = map[netip.Addr]int{}, map[netip.Addr]bool{}, map[int]int{}
		}
		for _, e := range added {
			m.mptcp.owned[e.Addr] = addrs[e.Addr]
			m.mptcp.backup[e.Addr] = false
		}
		m.mptcpMu.Unlock()
		if err != nil {
			return err
		}
		return m.applyBackupPM(pm)
	}()
	m.mptcpMu.Lock()
	m.mptcpErr = err
	m.mptcpMu.Unlock()
}

// useMPTCP counts an MPTCP connection about to be dialed with its first
// subflow on first, setting the endpoints' backup flags before the dial so
// the subflows join with the right priority. Call release when it closes
// (or the dial failed).
func (m *Manager) useMPTCP(first *Path, mp Multipath) (release func()) {
	if m == nil || !m.cfg.MPTCPEndpoints || (mp != MultipathHandover && mp != MultipathAggregate) {
		return func() {}
	}
	change := func(d int) {
		m.mptcpMu.Lock()
		if m.mptcp.owned == nil {
			m.mptcpMu.Unlock()
			return // no endpoint of ours (no permission: MPTCPError says so)
		}
		if mp == MultipathHandover {
			m.mptcp.handover += d
			m.mptcp.firstOn[first.Index] += d
		} else {
			m.mptcp.aggregate += d
		}
		m.mptcpMu.Unlock()
		m.pmMu.Lock()
		defer m.pmMu.Unlock()
		if err := m.applyBackupPM(nil); err != nil {
			m.mptcpMu.Lock()
			m.mptcpErr = err
			m.mptcpMu.Unlock()
		}
	}
	change(1)
	return func() { change(-1) }
}

// applyBackupPM sets each owned endpoint's backup flag to what the open
// connections want now: backup while handover connections are open, no
// aggregate one is, and no handover connection starts on its path. Under
// m.pmMu; pm may be nil (opened if a flag is to change).
func (m *Manager) applyBackupPM(pm *mptcp.PM) error {
	type change struct {
		addr   netip.Addr
		backup bool
	}
	var todo []change
	m.mptcpMu.Lock()
	u := &m.mptcp
	for a, pathIndex := range u.owned {
		if want := u.handover > 0 && u.aggregate == 0 && u.firstOn[pathIndex] == 0; u.backup[a] != want {
			todo = append(todo, change{a, want})
		}
	}
	m.mptcpMu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	if m.testHookPM != nil {
		m.testHookPM()
	}
	if pm == nil {
		var err error
		if pm, err = mptcp.OpenPM(); err != nil {
			return err
		}
		defer pm.Close()
	}
	var failed error
	for _, c := range todo {
		flags := mptcp.Subflow
		if c.backup {
			flags |= mptcp.Backup
		}
		if err := pm.SetFlags(mptcp.Endpoint{Addr: c.addr, Flags: flags}); err != nil {
			failed = cmp.Or(failed, err)
			continue
		}
		m.mptcpMu.Lock()
		u.backup[c.addr] = c.backup
		m.mptcpMu.Unlock()
	}
	return failed
}

// removeMPTCPEndpoints deletes the endpoints this Manager added (see
// Config.MPTCPEndpoints), at Close, when none of its MPTCP connections is
// open: the namespace is left as the Manager found it, and the next
// Manager in it adds (and so manages the backup flag of) its own. With
// connections still open the endpoints stay: deleting one removes their
// subflows from its address.
func (m *Manager) removeMPTCPEndpoints() {
	m.pmMu.Lock()
	defer m.pmMu.Unlock()
	m.mptcpMu.Lock()
	u := &m.mptcp
	if len(u.owned) == 0 || u.handover > 0 || u.aggregate > 0 {
		m.mptcpMu.Unlock()
		return
	}
	owned := make(map[netip.Addr]bool, len(u.owned))
	for a := range u.owned {
		owned[a] = true
	}
	m.mptcpMu.Unlock()
	pm, err := mptcp.OpenPM()
	if err != nil {
		return
	}
	defer pm.Close()
	have, err := pm.Endpoints()
	if err != nil {
		return
	}
	for _, e := range have {
		if owned[e.Addr] && pm.DeleteEndpoint(e.ID) == nil {
			m.mptcpMu.Lock()
			delete(u.owned, e.Addr)
			delete(u.backup, e.Addr)
			m.mptcpMu.Unlock()
		}
	}
}
