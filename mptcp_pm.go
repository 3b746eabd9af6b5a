package intents

import (
	"cmp"
	"net/netip"

	"github.com/sockintents/intents/mptcp"
)

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
	m.mptcpMu.Lock()
	defer m.mptcpMu.Unlock()
	m.mptcpErr = func() error {
		pm, err := mptcp.OpenPM()
		if err != nil {
			return err
		}
		defer pm.Close()
		addrs := map[netip.Addr]int{}
		pathOf := map[netip.Addr]int{}
		for _, p := range m.Paths() {
			if p.Up && p.Type != TypeLoopback {
				for _, a := range p.Addrs {
					addrs[a], pathOf[a] = p.Index, p.Index
				}
			}
		}
		added, err := pm.EnsureEndpoints(addrs, mptcp.Subflow)
		if m.mptcp.owned == nil {
			m.mptcp.owned, m.mptcp.backup, m.mptcp.firstOn = map[netip.Addr]int{}, map[netip.Addr]bool{}, map[int]int{}
		}
		for _, e := range added {
			m.mptcp.owned[e.Addr] = pathOf[e.Addr]
			m.mptcp.backup[e.Addr] = false
		}
		if err != nil {
			return err
		}
		return m.applyBackupLocked(pm)
	}()
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
		defer m.mptcpMu.Unlock()
		if m.mptcp.owned == nil {
			return // no endpoint of ours (no permission: MPTCPError says so)
		}
		if mp == MultipathHandover {
			m.mptcp.handover += d
			m.mptcp.firstOn[first.Index] += d
		} else {
			m.mptcp.aggregate += d
		}
		if err := m.applyBackupLocked(nil); err != nil {
			m.mptcpErr = err
		}
	}
	change(1)
	return func() { change(-1) }
}

// applyBackupLocked sets each owned endpoint's backup flag to what the open
// connections want: backup while handover connections are open, no
// aggregate one is, and no handover connection starts on its path.
func (m *Manager) applyBackupLocked(pm *mptcp.PM) error {
	u := &m.mptcp
	var failed error
	for a, pathIndex := range u.owned {
		want := u.handover > 0 && u.aggregate == 0 && u.firstOn[pathIndex] == 0
		if u.backup[a] == want {
			continue
		}
		if pm == nil {
			var err error
			if pm, err = mptcp.OpenPM(); err != nil {
				return err
			}
			defer pm.Close()
		}
		flags := mptcp.Subflow
		if want {
			flags |= mptcp.Backup
		}
		if err := pm.SetFlags(mptcp.Endpoint{Addr: a, Flags: flags}); err != nil {
			failed = cmp.Or(failed, err)
			continue
		}
		u.backup[a] = want
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
	m.mptcpMu.Lock()
	defer m.mptcpMu.Unlock()
	u := &m.mptcp
	if len(u.owned) == 0 || u.handover > 0 || u.aggregate > 0 {
		return
	}
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
		if _, ok := u.owned[e.Addr]; ok {
			if pm.DeleteEndpoint(e.ID) == nil {
				delete(u.owned, e.Addr)
				delete(u.backup, e.Addr)
			}
		}
	}
}
