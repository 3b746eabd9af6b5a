package intents

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/tcpinfo"
)

// A path marked Unresponsive is left out of decisions, with the reason,
// while another path may carry the request; with none other it is kept.
func TestDecisionsLeaveOutUnresponsivePaths(t *testing.T) {
	p1, p2, _ := racePathsUnderTest()
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		for _, p := range req.Paths {
			d.Choices = append(d.Choices, Choice{Path: p})
		}
	}))
	paths := []*Path{p1, p2}
	m.paths.Store(&paths)
	plannedPaths := func(ctx context.Context) []string {
		pl, err := m.plan(ctx, "tcp", "203.0.113.1", 80, false)
		require.NoError(t, err)
		var names []string
		for _, c := range pl.choices {
			names = append(names, c.Path.Name)
		}
		return names
	}
	assert.Equal(t, []string{"p1", "p2"}, plannedPaths(context.Background()))

	require.True(t, p1.est.MarkUnresponsive())
	assert.True(t, p1.Estimate().Unresponsive)
	var info DecisionInfo
	ctx := WithDecisionTrace(context.Background(), func(d DecisionInfo) { info = d })
	assert.Equal(t, []string{"p2"}, plannedPaths(ctx))
	assert.Equal(t, []Exclusion{{Path: "p1", Reason: "unresponsive (carried nothing while data was owed; probed until it answers)"}}, info.Excluded)

	// Required, or the only path left: tried anyway.
	required := WithIntents(context.Background(), Intents{Interfaces: map[string]Level{"p1": LevelRequire}})
	assert.Equal(t, []string{"p1"}, plannedPaths(required))
	p2.est.MarkUnresponsive()
	assert.Equal(t, []string{"p1", "p2"}, plannedPaths(context.Background()))
}

// A handshake that gets through a path clears its mark.
func TestHandshakeClearsUnresponsive(t *testing.T) {
	l := listen(t, "tcp4", "127.0.0.1:0")
	m := loManager(t, nil)
	p := m.Paths()[0]
	require.NotNil(t, p.est)
	p.est.MarkUnresponsive()
	c, err := (&Dialer{}).dialChoice(context.Background(), m, "tcp4", "127.0.0.1", uint16(l.Addr().(*net.TCPAddr).Port), Choice{Path: p}, MultipathOff)
	require.NoError(t, err)
	c.Close()
	assert.False(t, p.Estimate().Unresponsive)
}

// How long a connection has been quiet: since anything arrived, within
// its requests' time, and not at all while bytes wait unread.
func TestQuietFor(t *testing.T) {
	info := tcpinfo.Info{LastDataRecv: 3 * time.Second, LastAckRecv: 300 * time.Millisecond}
	assert.Equal(t, 300*time.Millisecond, quietFor(info, time.Minute), "an acknowledgment is an answer")
	assert.Equal(t, 50*time.Millisecond, quietFor(info, 50*time.Millisecond), "a request sent 50 ms ago")
	info.Unread = 1
	assert.Zero(t, quietFor(info, time.Minute), "the reader is behind, not the path")
	assert.Equal(t, 100*time.Millisecond, probeAfter(10*time.Millisecond))
	assert.Equal(t, 300*time.Millisecond, probeAfter(150*time.Millisecond))
	assert.Equal(t, 200*time.Millisecond, deadAfter(10*time.Millisecond))
	assert.Equal(t, 450*time.Millisecond, deadAfter(150*time.Millisecond))
}

// A probe answered with a refusal is an answer: the peer's host is there.
func TestProbeAnsweredByRefusal(t *testing.T) {
	l := listen(t, "tcp4", "127.0.0.1:0")
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	l.Close() // nothing listens now: the kernel refuses
	c := newCore(loManager(t, nil), coreConfig{})
	defer c.close()
	err := c.health.probeLive(context.Background(), c.m.Paths()[0], netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port))
	require.Error(t, err)
	assert.True(t, answered(err), "%v", err)
	assert.False(t, answered(context.DeadlineExceeded))
}

// The re-probes of a marked path go to the peer and the path's DNS
// servers (TCP port 53), not to a local stub resolver.
func TestReprobeTargets(t *testing.T) {
	peer := netip.MustParseAddrPort("203.0.113.7:443")
	p := &Path{DNS: []netip.AddrPort{
		netip.MustParseAddrPort("127.0.0.53:53"),  // the local stub: not on the path
		netip.MustParseAddrPort("192.0.2.53:53"),  // a server on it
		netip.MustParseAddrPort("192.0.2.53:853"), // the same, for DNS over TLS
		netip.MustParseAddrPort("[2001:db8::53]:5353"),
	}}
	assert.Equal(t, []netip.AddrPort{peer, netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("[2001:db8::53]:53")},
		reprobeTargets(p, peer))
}

// A silence is probed from two RTTs (at least 100 ms); once a probe was
// answered for the same requests, only a silence four times as long is:
// a stream that idles by design is probed a few times, not at each pause.
func TestProbeDue(t *testing.T) {
	ms := time.Millisecond
	assert.Equal(t, 50*ms, probeDue(50*ms, 10*ms, 0))
	assert.Zero(t, probeDue(100*ms, 10*ms, 0), "probe now")
	assert.Equal(t, 300*ms, probeDue(0, 150*ms, 0), "two RTTs of a long path")
	assert.Equal(t, 300*ms, probeDue(100*ms, 10*ms, 100*ms), "answered at 100 ms: next at 400")
	assert.Zero(t, probeDue(400*ms, 10*ms, 100*ms))
	// Silences of 30 s, one after another, on one long request: probes at
	// 100 ms, 400 ms, 1.6 s, 6.4 s and 25.6 s of the first, then none.
	var answered time.Duration
	probes := 0
	for range 5 {
		for quiet := time.Duration(0); quiet <= 30*time.Second; quiet += 20 * ms {
			if probeDue(quiet, 10*ms, answered) == 0 {
				probes++
				answered = quiet
			}
		}
	}
	assert.Equal(t, 5, probes)
}

// A spare connection goes only to a path that every request on the quiet
// connection permits: one that prohibits path b gets none there.
func TestSpareOnlyWhereTheRequestsMayGo(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	b := fakePath("b", "10.9.1.1")
	var dialed []string
	dial := func(ctx context.Context, ch Choice) (pooled, net.Conn, error) {
		dialed = append(dialed, ch.Path.Name)
		return nil, nil, errors.New("not dialed in this test")
	}
	e := busyEntry(1, a)
	e.origin.dest, e.origin.permitted, e.origin.dial = testDest, []*Path{a, b}, dial
	e.granted = []Intents{{Interfaces: map[string]Level{"b": LevelProhibit}}}
	c := poolWith(loManager(t, nil), 0, 0, []*Path{a, b}, e)
	defer c.close()
	warm := func() {
		c.health.warmSpare(e)
		c.health.runs.Wait()
	}
	warm()
	assert.Empty(t, dialed, "a request on it prohibits b")
	e.granted = nil
	warm()
	assert.Equal(t, []string{"b"}, dialed)

	// A request given a connection is among those it answers for.
	idle := &entry{id: 2, key: "k", path: a, c: &fakeConn{}, origin: entryOrigin{dial: dial}, created: time.Now(), lastUsed: time.Now()}
	w := queuedWaiter(1000)
	w.in.Interfaces = map[string]Level{"b": LevelProhibit}
	c.mu.Lock()
	_, ok := c.sched.reserve(w, idle, time.Now())
	granted := idle.granted
	c.mu.Unlock()
	require.True(t, ok)
	require.Len(t, granted, 1)
	assert.Equal(t, LevelProhibit, granted[0].Interfaces["b"])
}

// A stalled connection's body resumes elsewhere only while the timeout its
// server waits out, minRTO and a round trip from its last transmission,
// is still ahead by more than a new connection's set-up: past that, or on
// a long round trip, the connection is left to its server (a connection
// quiet behind the others' bytes on a slow path would throw its own away).
// And only a connection quiet since the probe, carrying one body that
// resumes by range.
func TestResumeStalledBound(t *testing.T) {
	p := fakePath("p1", "192.0.2.10")
	for _, tc := range []struct {
		name       string
		rtt, quiet time.Duration
		resumable  bool
		resumes    bool
	}{
		{"short round trip, short silence", 10 * time.Millisecond, 120 * time.Millisecond, true, true},
		{"long round trip", 90 * time.Millisecond, 120 * time.Millisecond, true, false},
		{"long silence", 10 * time.Millisecond, 190 * time.Millisecond, true, false},
		{"heard since the probe", 10 * time.Millisecond, 50 * time.Millisecond, true, false},
		{"a body that cannot resume", 10 * time.Millisecond, 120 * time.Millisecond, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := busyEntry(1, p)
			e.fate.resumable.Store(tc.resumable)
			e.sample.activeSince = time.Now().Add(-time.Second)
			c := poolWith(loManager(t, nil), 6, 17, []*Path{p}, e)
			info := tcpinfo.Info{RTT: tc.rtt, LastDataRecv: tc.quiet, LastAckRecv: tc.quiet}
			c.health.resumeStalled(e, info, 100*time.Millisecond) // probed after 100 ms of silence
			assert.Equal(t, tc.resumes, e.fate.stalled.Load(), "stalled")
			assert.Equal(t, tc.resumes, e.removed, "closed for the body to resume")
		})
	}
}

// On a path taken for silent, a connection closes only where that loses
// nothing: no request, or one request sent again elsewhere or resumed
// there. One with a request that would fail is held.
func TestRecoverable(t *testing.T) {
	for _, c := range []struct {
		name                  string
		busy                  bool
		replayable, resumable bool
		want                  bool
	}{
		{"idle", false, false, false, true},
		{"a request sent again elsewhere", true, true, false, true},
		{"a body that resumes", true, false, true, true},
		{"a body that cannot resume, or a request that may not be sent twice", true, false, false, false},
	} {
		e := &entry{c: &fakeConn{busy: c.busy}}
		e.fate.replayable.Store(c.replayable)
		e.fate.resumable.Store(c.resumable)
		assert.Equal(t, c.want, e.recoverable(), c.name)
	}
}
