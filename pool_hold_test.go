package intents

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdPool is a pool over a path whose RTT is known (a, with three busy
// connections to destination "k") and one whose first handshake has not
// answered (b), whose policy wants a new connection on a, then on b; the
// origin "o" has told samples sizes.
func holdPool(t *testing.T, rtt time.Duration, samples *int) (c *core, a, b *Path) {
	a = fakePath("a", "10.9.0.1")
	a.Prior = Estimate{RTT: rtt}
	b = fakePath("b", "10.9.1.1")
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		d.Choices = append(d.Choices, Choice{Path: a, Fresh: true}, Choice{Path: b, Fresh: true})
	}))
	c = poolWith(m, 6, 17, []*Path{a, b}, busyEntry(1, a), busyEntry(2, a), busyEntry(3, a))
	c.sched.originSize = func(string) (int64, sizeSource) { return 10_000, sizeFromRecent }
	c.sched.originSettled = func(string) bool { return *samples >= sizesToHoldFor }
	t.Cleanup(c.close)
	return c, a, b
}

// burstWaiter is a queued request to an origin not heard from yet, whose
// size is every origin's typical one.
func burstWaiter(c *core) *waiter {
	w := queuedWaiter(10_000)
	w.sizeOrigin, w.sizeSource = "o", sizeFromRecent
	setQueue(c, w)
	return w
}

func attemptNow(c *core, w *waiter) (grant, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sched.attempt(w, nil)
}

// A page's burst of requests, each predicted at the one size its origin
// has told (the root's), opens no more than holdConns connections on
// the measured paths while another path's RTT is not known, on that path
// no more either: the rest wait for the page's first sizes.
func TestABurstWaitsForTheFirstSizes(t *testing.T) {
	samples := 1
	c, a, b := holdPool(t, time.Hour, &samples) // a bound far off: only sizes end this hold
	w := burstWaiter(c)
	_, ok := attemptNow(c, w)
	assert.False(t, ok, "held: no new connection on a, nor on b")
	assert.Zero(t, c.reg.dialingTo("k"))

	samples = sizesToHoldFor // the first responses' headers are in
	g, ok := attemptNow(c, w)
	require.True(t, ok)
	assert.True(t, g.dials(), "a new connection")
	assert.Equal(t, 1, c.reg.dialing[dialKey{"k", a}], "on the path the policy wants first")
	assert.Zero(t, c.reg.dialing[dialKey{"k", b}])
	var buf strings.Builder
	logGrant(context.Background(), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &w.in, g, time.Now())
	assert.Contains(t, buf.String(), `held="for the origin's first sizes"`, "the grant's log line says why it waited")
	c.undo(g)
}

// Nothing is held where the guesses that call for it are not made: the
// other path's RTT is known, the size is not an origin's guess, fewer
// connections are open, or the origin's size stands on enough responses.
func TestNoHoldWithoutTheGuesses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(c *core, w *waiter, b *Path, samples *int)
	}{
		{"other path measured", func(_ *core, _ *waiter, b *Path, _ *int) { b.Prior = Estimate{RTT: 200 * time.Millisecond} }},
		{"size of the URL", func(_ *core, w *waiter, _ *Path, _ *int) { w.sizeOrigin, w.sizeSource = "", sizeFromURL }},
		{"size of the origin itself", func(c *core, _ *waiter, _ *Path, _ *int) {
			c.sched.originSize = func(string) (int64, sizeSource) { return 10_000, sizeFromOrigin }
		}},
		{"two connections open", func(c *core, _ *waiter, _ *Path, _ *int) { c.reg.entries["k"] = c.reg.entries["k"][:2] }},
		{"sizes known", func(_ *core, _ *waiter, _ *Path, samples *int) { *samples = sizesToHoldFor }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			samples := 1
			c, _, b := holdPool(t, time.Hour, &samples)
			w := burstWaiter(c)
			tc.setup(c, w, b, &samples)
			g, ok := attemptNow(c, w)
			require.True(t, ok, "not held")
			assert.True(t, g.dials())
			assert.False(t, g.held)
			c.undo(g)
		})
	}
}

// A hold lasts at most holdRTTs round trips of the measured path: then the
// waiter is decided again, and granted, without anything else happening.
func TestAHoldEnds(t *testing.T) {
	samples := 1
	c, _, _ := holdPool(t, time.Millisecond, &samples)
	w := burstWaiter(c)
	_, ok := attemptNow(c, w)
	require.False(t, ok, "held")
	select {
	case g := <-w.ch:
		require.NoError(t, g.err)
		assert.True(t, g.dials())
		c.undo(g)
	case <-time.After(10 * time.Second):
		t.Fatal("still held")
	}
}

// The size that settles every origin's median decides the held requests
// to an origin not heard from again: the third of a page of large
// objects, the second of one whose first object is smaller than its root.
func TestASettledSizeEndsTheHold(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int64 // the root's, then the page's; the last settles
	}{
		{"large objects", []int64{10_000, 100_000, 100_000}},
		{"small objects", []int64{10_000, 1_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sizes := &sizeCache{max: 16}
			c, _, _ := holdPool(t, time.Hour, new(int))
			c.sched.originSettled = sizes.settled
			w := burstWaiter(c)
			last := len(tc.sizes) - 1
			for i, n := range tc.sizes[:last] {
				learnSize(sizes, c, objectKey{"root", "/" + strconv.Itoa(i)}, n) // the page's first host
				_, ok := attemptNow(c, w)
				require.False(t, ok, "held after %d sizes", i+1)
			}
			learnSize(sizes, c, objectKey{"root", "/last"}, tc.sizes[last])
			g := granted(t, w, "decided again once the size settled")
			assert.True(t, g.dials())
			c.undo(g)
		})
	}
}

func TestSizeCacheSaysWhenItsMedianSettles(t *testing.T) {
	s := &sizeCache{max: 16}
	put := func(origin string, sizes ...int64) (got []bool) {
		for i, n := range sizes {
			got = append(got, s.put(objectKey{origin, "/" + strconv.Itoa(i)}, n))
		}
		return got
	}
	assert.Equal(t, []bool{false, false, true, false}, put("o", 10_000, 100_000, 100_000, 100_000), "the third size")
	assert.Equal(t, []bool{false, true}, put("p", 10_000, 1_000), "the second, smaller than the first")
	assert.True(t, s.settled("o"))
	assert.False(t, (&sizeCache{}).settled("o"), "nothing known")
	assert.True(t, s.settled("other"), "an origin not heard from: every origin's")
}
