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
	m.cfg.Probe = ProbeConfig{Target: "10.71.100.1:80", Interval: time.Millisecond}
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
	for name, want := range map[string]time.Duration{"p1": 10 * time.Millisecond, "p2": 40 * time.Millisecond} {
		e := m.Path(name).Estimate()
		t.Logf("%s: probe RTT %v (set %v)", name, e.ProbeRTT, want)
		assert.InDelta(t, want.Seconds(), e.ProbeRTT.Seconds(), want.Seconds()*0.15+0.001, name)
		assert.True(t, e.Measured)
	}
}

func TestProbeTargetMustBeHostPort(t *testing.T) {
	_, err := NewManager(Config{Paths: []PathConfig{{Interface: "lo"}}, NoWatch: true, Probe: ProbeConfig{Target: "nohostport"}})
	assert.ErrorContains(t, err, "probe target")
}
