package intents

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsProbe probes two emulated paths of different RTTs and checks that
// each path's probes measured its own RTT, which shows they went out on it.
func TestNetnsProbe(t *testing.T) {
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{
		testbed.Symmetric(10*time.Millisecond, 0), testbed.Symmetric(40*time.Millisecond, 0)}})
	_, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsProbeChild", "probe")
}

func TestNetnsProbeChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsProbe")
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: "p1"}, {Interface: "p2"}}, NoWatch: true})
	require.NoError(t, err)
	// Start the prober by hand so the test hook is in place before it runs.
	probeIntervalFloor = 0
	m.cfg.ProbeTarget, m.cfg.ProbeInterval = "10.71.100.1:80", time.Millisecond
	probed := make(chan struct{})
	m.testHookProbed = func() { probed <- struct{}{} }
	m.probing, m.probed = make(chan struct{}), make(chan struct{})
	go m.probe()
	for range 5 { // the median of five rounds
		<-probed
	}
	go func() { // let a round in progress report while Close waits
		for range probed {
		}
	}()
	require.NoError(t, m.Close())
	close(probed)
	// A probe cannot come back before its path's delay, and a busy machine
	// only adds to it (a run beside other packages' tests measured 13.7 ms
	// on the 10 ms path): each path's RTT is bounded below by its own and
	// above by the midpoint to the other's, or half its own again for the
	// farther one, which tells which path the probes went out on.
	for _, c := range []struct {
		name       string
		set, below time.Duration
	}{{"p1", 10 * time.Millisecond, 25 * time.Millisecond}, {"p2", 40 * time.Millisecond, 60 * time.Millisecond}} {
		e := m.Path(c.name).Estimate()
		t.Logf("%s: probe RTT %v (set %v)", c.name, e.ProbeRTT, c.set)
		assert.GreaterOrEqual(t, e.ProbeRTT, c.set*95/100, c.name)
		assert.Less(t, e.ProbeRTT, c.below, c.name)
		assert.True(t, e.Measured)
	}
}

func TestProbeTargetMustBeHostPort(t *testing.T) {
	_, err := NewManager(Config{Paths: []PathConfig{{Interface: "lo"}}, NoWatch: true, ProbeTarget: "nohostport"})
	assert.ErrorContains(t, err, "probe target")
}
