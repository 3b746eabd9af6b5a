package intents

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/estimate"
)

// racePathsUnderTest is two made-up paths with estimates, and a plan over
// them.
func racePathsUnderTest() (p1, p2 *Path, pl plan) {
	p1 = &Path{Name: "p1", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, est: estimate.New(0, 0)}
	p2 = &Path{Name: "p2", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}, est: estimate.New(0, 0)}
	return p1, p2, plan{choices: []Choice{{Path: p1}, {Path: p2}}}
}

// A path that does not connect loses the race to the next one, started
// after the race delay; it is cancelled, and its estimates learn that it
// was slow.
func TestRacePathsSilentFirst(t *testing.T) {
	p1, p2, pl := racePathsUnderTest()
	d := &Dialer{RacePaths: true, PathRaceDelay: 20 * time.Millisecond}
	var mu sync.Mutex
	started := map[string]time.Time{}
	cancelled := make(chan struct{})
	ours, theirs := net.Pipe()
	defer theirs.Close()
	// Path 1's dial goroutine may note its start after the race's timer
	// was set: the delay is measured from before the race.
	before := time.Now()
	conn, errs := d.racePaths(context.Background(), &Intents{}, pl, func(ctx context.Context, c Choice) (net.Conn, error) {
		mu.Lock()
		started[c.Path.Name] = time.Now()
		mu.Unlock()
		if c.Path == p1 {
			<-ctx.Done() // a blackhole: only the race's end ends it
			close(cancelled)
			return nil, ctx.Err()
		}
		return ours, nil
	})
	require.Empty(t, errs)
	assert.Same(t, ours, conn, "path 2 won")
	<-cancelled
	assert.GreaterOrEqual(t, started["p2"].Sub(before), 20*time.Millisecond, "path 2 started after the race delay")
	e := p1.Estimate()
	assert.True(t, e.Measured, "path 1 got an RTT sample")
	assert.GreaterOrEqual(t, e.RTT, 20*time.Millisecond, "of at least the time it had taken")
	assert.Positive(t, e.Loss, "and a loss")
	assert.False(t, p2.Estimate().Measured, "the winner's own dial measures it")
}

// A path that fails hands over at once, without waiting for the delay; a
// connection made after the winner's is closed.
func TestRacePathsFailureAndLateLoser(t *testing.T) {
	p1, _, pl := racePathsUnderTest()
	d := &Dialer{RacePaths: true, PathRaceDelay: time.Hour}
	ours, theirs := net.Pipe()
	defer theirs.Close()
	conn, errs := d.racePaths(context.Background(), &Intents{}, pl, func(ctx context.Context, c Choice) (net.Conn, error) {
		if c.Path == p1 {
			return nil, errors.New("refused")
		}
		return ours, nil
	})
	assert.Same(t, ours, conn, "path 2 at once after path 1 failed, not after an hour")
	require.Len(t, errs, 1, "path 1's failure, which DialContext drops when another path connected")

	// Both connect; the later one is closed.
	late, lateTheirs := net.Pipe()
	defer lateTheirs.Close()
	first, firstTheirs := net.Pipe()
	defer firstTheirs.Close()
	d.PathRaceDelay = time.Millisecond
	conn, _ = d.racePaths(context.Background(), &Intents{}, pl, func(ctx context.Context, c Choice) (net.Conn, error) {
		if c.Path == p1 {
			<-ctx.Done() // the race is decided; it connects anyway
			return late, nil
		}
		return first, nil
	})
	assert.Same(t, first, conn)
	_, err := late.Write([]byte("x"))
	assert.ErrorIs(t, err, io.ErrClosedPipe, "the late connection was closed")
}

// Every path failing: every path's error.
func TestRacePathsAllFail(t *testing.T) {
	_, _, pl := racePathsUnderTest()
	d := &Dialer{RacePaths: true}
	conn, errs := d.racePaths(context.Background(), &Intents{}, pl, func(ctx context.Context, c Choice) (net.Conn, error) {
		return nil, errors.New("refused on " + c.Path.Name)
	})
	assert.Nil(t, conn)
	require.Len(t, errs, 2)
	assert.ElementsMatch(t, []string{"p1", "p2"}, []string{errs[0].Path, errs[1].Path})
}

// An expensive or avoided path joins a race only for sensitive intents.
func TestRaceable(t *testing.T) {
	cheap := &Path{Name: "p2"}
	costly := &Path{Name: "p2", Expensive: true}
	avoid := Intents{Interfaces: map[string]Level{"p2": LevelAvoid}}
	assert.True(t, raceable(&Intents{}, cheap))
	assert.False(t, raceable(&Intents{}, costly))
	assert.False(t, raceable(&avoid, cheap))
	assert.True(t, raceable(&Intents{Resilience: ResilienceSensitive}, costly))
	avoid.Resilience = ResilienceSensitive
	assert.True(t, raceable(&avoid, cheap))
	assert.True(t, raceable(&Intents{}, nil), "system routing")
}

// A path that may not race is still dialed when the one before failed,
// as without racing.
func TestRacePathsExpensiveAfterFailure(t *testing.T) {
	p1, p2, pl := racePathsUnderTest()
	p2.Expensive = true
	d := &Dialer{RacePaths: true, PathRaceDelay: time.Millisecond}
	ours, theirs := net.Pipe()
	defer theirs.Close()
	var order []string
	conn, _ := d.racePaths(context.Background(), &Intents{}, pl, func(ctx context.Context, c Choice) (net.Conn, error) {
		order = append(order, c.Path.Name) // one at a time: no race
		if c.Path == p1 {
			return nil, errors.New("refused")
		}
		return ours, nil
	})
	assert.Same(t, ours, conn)
	assert.Equal(t, []string{"p1", "p2"}, order)
	assert.False(t, p1.Estimate().Measured, "a failure is no lost race")
}
