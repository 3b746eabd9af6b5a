package intents

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Setting the endpoints' backup flags is netlink I/O: while it is under
// way the Manager's MPTCP state stays readable, and another connection's
// count is taken without waiting for it.
func TestMPTCPFlagsAreSetOutsideTheManagerLock(t *testing.T) {
	m := loManager(t, nil)
	defer m.Close()
	m.cfg.MPTCPEndpoints = true
	m.mptcp.owned = map[netip.Addr]int{netip.MustParseAddr("192.0.2.1"): 2}
	m.mptcp.backup = map[netip.Addr]bool{}
	m.mptcp.firstOn = map[int]int{}
	entered, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	defer released.Do(func() { close(release) }) // before Close, if the test fails while it waits
	m.mptcp.testHookPM = func() {
		close(entered)
		<-release
	}
	first := &Path{Name: "a", Index: 1}
	done := make(chan func(), 1)
	go func() { done <- m.useMPTCP(first, MultipathHandover) }() // wants 192.0.2.1 a backup
	<-entered
	within(t, "the MPTCP state while flags are being set", func() {
		_ = m.MPTCPError()
		m.mptcp.mu.Lock()
		assert.Equal(t, 1, m.mptcp.handover, "counted before the flags are set")
		m.mptcp.mu.Unlock()
	})
	m.mptcp.testHookPM = nil
	released.Do(func() { close(release) })
	(<-done)()
	m.mptcp.mu.Lock()
	assert.Zero(t, m.mptcp.handover)
	m.mptcp.mu.Unlock()
}
