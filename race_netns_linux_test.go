package intents_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsRacePaths dials a server preferring path 1, which has turned
// into a blackhole (its link up, every packet lost): with RacePaths the
// dial connects over path 2 once path 1 had its race delay; without, it
// waits on path 1 until its timeout.
func TestNetnsRacePaths(t *testing.T) {
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{
		testbed.Symmetric(20*time.Millisecond, 20e6), testbed.Symmetric(40*time.Millisecond, 20e6)}})
	_, err := tb.StartWeb(testbed.WebOptions{NoMPTCP: true})
	require.NoError(t, err)
	tb.Paths[0].SetDown(true)
	testbed.RunTest(t, tb.Client, "TestNetnsRacePathsChild", "race")
}

func TestNetnsRacePathsChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsRacePaths")
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	ctx := intents.WithIntents(context.Background(), intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}})

	racing := &intents.Dialer{Manager: m, RacePaths: true, Timeout: 5 * time.Second}
	start := time.Now()
	c, err := racing.DialContext(ctx, "tcp", "10.71.100.1:80")
	took := time.Since(start)
	require.NoError(t, err)
	defer c.Close()
	p, _ := intents.PathOf(c)
	require.NotNil(t, p)
	assert.Equal(t, "p2", p.Name, "path 2 won the race")
	p1 := m.Path("p1").Estimate()
	const raceDelay = 250 * time.Millisecond // the Dialer's, for a path whose RTT is not known yet
	t.Logf("connected over path 2 after %v (race delay %v, path 2's RTT 40 ms); path 1's estimate now: RTT %v, loss %.2f",
		took.Round(time.Millisecond), raceDelay, p1.RTT.Round(time.Millisecond), p1.Loss)
	assert.True(t, p1.Measured, "path 1's loss is in its estimate")
	assert.GreaterOrEqual(t, p1.RTT, raceDelay)

	plain := &intents.Dialer{Manager: m, Timeout: time.Second}
	start = time.Now()
	_, err = plain.DialContext(ctx, "tcp", "10.71.100.1:80")
	// Path 1 until the timeout (path 2 may be tried as the deadline passes,
	// and fail at once: both errors are joined then).
	// The timeout is the dial's deadline (os.ErrDeadlineExceeded) or its
	// context's (context.DeadlineExceeded), whichever the socket noticed.
	require.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded),
		"without racing: path 1 until the timeout (%v)", err)
	assert.Contains(t, err.Error(), "10.71.1.1", "path 1 was tried")
	t.Logf("without racing: %v after %v", err, time.Since(start).Round(time.Millisecond))
}
