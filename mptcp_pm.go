package intents

import (
	"cmp"
	"net/netip"
	"sync"

	"github.com/sockintents/intents/mptcp"
)

// endpoints keeps the MPTCP endpoints a Manager adds (see
// Config.MPTCPEndpoints) and their backup flags, counting the open MPTCP
// connections its Dialers made by mode. Two locks: mu guards the state and
// is never held across netlink; pmMu orders the netlink calls (one at a
// time, each applying the state as it is when it starts) and is taken
// only by them. A dial that must see the flags set waits for its own
// call; the error and the counts never wait for netlink.
type endpoints struct {
	mu                  sync.Mutex
	err                 error // of the last attempt to configure them
	handover, aggregate int
	firstOn             map[int]int        // handover connections by their first path's index
	owned               map[netip.Addr]int // endpoints added: address → path index
	backup              map[netip.Addr]bool

	pmMu       sync.Mutex
	testHookPM func() // called under pmMu before flags are set
}

// ensure adds an endpoint for every up path that lacks one.
func (ep *endpoints) ensure(paths []*Path) {
	ep.pmMu.Lock()
	defer ep.pmMu.Unlock()
	addrs := map[netip.Addr]int{}
	for _, p := range paths {
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
		ep.mu.Lock()
		if ep.owned == nil {
			ep.owned, ep.backup, ep.firstOn = map[netip.Addr]int{}, map[netip.Addr]bool{}, map[int]int{}
		}
		for _, e := range added {
			ep.owned[e.Addr] = addrs[e.Addr]
			ep.backup[e.Addr] = false
		}
		ep.mu.Unlock()
		if err != nil {
			return err
		}
		return ep.applyBackup(pm)
	}()
	ep.mu.Lock()
	ep.err = err
	ep.mu.Unlock()
}

// count adds d to the connections of mode mp whose first subflow is on
// first, and sets the flags that wants.
func (ep *endpoints) count(first *Path, mp Multipath, d int) {
	ep.mu.Lock()
	if ep.owned == nil {
		ep.mu.Unlock()
		return // no endpoint of ours (no permission: MPTCPError says so)
	}
	if mp == MultipathHandover {
		ep.handover += d
		ep.firstOn[first.Index] += d
	} else {
		ep.aggregate += d
	}
	ep.mu.Unlock()
	ep.pmMu.Lock()
	defer ep.pmMu.Unlock()
	if err := ep.applyBackup(nil); err != nil {
		ep.mu.Lock()
		ep.err = err
		ep.mu.Unlock()
	}
}

// applyBackup sets each owned endpoint's backup flag to what the open
// connections want now: backup while handover connections are open, no
// aggregate one is, and no handover connection starts on its path. Under
// ep.pmMu; pm may be nil (opened if a flag is to change).
func (ep *endpoints) applyBackup(pm *mptcp.PM) error {
	type change struct {
		addr   netip.Addr
		backup bool
	}
	var todo []change
	ep.mu.Lock()
	for a, pathIndex := range ep.owned {
		if want := ep.handover > 0 && ep.aggregate == 0 && ep.firstOn[pathIndex] == 0; ep.backup[a] != want {
			todo = append(todo, change{a, want})
		}
	}
	ep.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	if ep.testHookPM != nil {
		ep.testHookPM()
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
		ep.mu.Lock()
		ep.backup[c.addr] = c.backup
		ep.mu.Unlock()
	}
	return failed
}

// remove deletes the endpoints added, at the Manager's Close, when none
// of its MPTCP connections is open: the namespace is left as the Manager
// found it, and the next Manager in it adds (and so manages the backup
// flag of) its own. With connections still open the endpoints stay:
// deleting one removes their subflows from its address.
func (ep *endpoints) remove() {
	ep.pmMu.Lock()
	defer ep.pmMu.Unlock()
	ep.mu.Lock()
	if len(ep.owned) == 0 || ep.handover > 0 || ep.aggregate > 0 {
		ep.mu.Unlock()
		return
	}
	owned := make(map[netip.Addr]bool, len(ep.owned))
	for a := range ep.owned {
		owned[a] = true
	}
	ep.mu.Unlock()
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
			ep.mu.Lock()
			delete(ep.owned, e.Addr)
			delete(ep.backup, e.Addr)
			ep.mu.Unlock()
		}
	}
}
