package testbed

import (
	"fmt"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// TCPCounters are a namespace's TCP loss-recovery counters, as nstat shows
// them: they tell a page load that waited for a retransmission timeout
// from one that did not.
type TCPCounters struct {
	Retransmits int64 // segments sent again (Tcp RetransSegs)
	Timeouts    int64 // retransmission timeouts (TcpExt TCPTimeouts)
	LossProbes  int64 // tail loss probes (TcpExt TCPLossProbes)
}

// Sub is c minus an earlier reading.
func (c TCPCounters) Sub(earlier TCPCounters) TCPCounters {
	return TCPCounters{c.Retransmits - earlier.Retransmits, c.Timeouts - earlier.Timeouts, c.LossProbes - earlier.LossProbes}
}

// TCPCounters reads the namespace's counters.
func (n *Netns) TCPCounters() (TCPCounters, error) {
	var c TCPCounters
	err := n.Do(func() error {
		fs, err := procfs.NewFS("/proc")
		if err != nil {
			return err
		}
		// /proc/self/net is the main thread's namespace; this thread's is
		// under its own task ID.
		p, err := fs.Proc(unix.Gettid())
		if err != nil {
			return err
		}
		snmp, err := p.Snmp()
		if err != nil {
			return err
		}
		ext, err := p.Netstat()
		if err != nil {
			return err
		}
		for _, f := range []struct {
			dst  *int64
			src  *float64
			what string
		}{{&c.Retransmits, snmp.Tcp.RetransSegs, "Tcp RetransSegs"},
			{&c.Timeouts, ext.TcpExt.TCPTimeouts, "TcpExt TCPTimeouts"},
			{&c.LossProbes, ext.TcpExt.TCPLossProbes, "TcpExt TCPLossProbes"}} {
			if f.src == nil {
				return fmt.Errorf("testbed: %s not in %s's counters", f.what, n.Name)
			}
			*f.dst = int64(*f.src)
		}
		return nil
	})
	return c, err
}
