package intents

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A caller that refills each ended response at once, twice in a row, is
// guessed to hold back as many requests as it sent since it last paused,
// up to four rounds of its other requests in flight.
func TestClosedLoopRefillsGuessABacklog(t *testing.T) {
	var l closedLoops
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for i := range 6 { // six requests at once: a burst, no refill
		l.arrived("k", at(i))
	}
	assert.Zero(t, l.backlog("k", 5, 100_000), "a burst is not a closed loop")

	l.ended("k", at(100))
	l.arrived("k", at(101))
	assert.Zero(t, l.backlog("k", 5, 100_000), "one refill may be a page's first request after its root")
	l.ended("k", at(200))
	l.arrived("k", at(201))
	assert.EqualValues(t, 8*100_000, l.backlog("k", 5, 100_000), "as many as it sent: the burst and two refills")
	for i := range 4 {
		l.ended("k", at(300+100*i))
		l.arrived("k", at(301+100*i))
	}
	assert.EqualValues(t, 12*100_000, l.backlog("k", 5, 100_000))
	assert.EqualValues(t, maxRoundsGuessed*100_000, l.backlog("k", 1, 100_000), "up to four rounds of its others in flight")
	assert.Zero(t, l.backlog("k", 0, 100_000), "one request at a time gains nothing from another path")
	assert.Zero(t, l.backlog("k", 5, 0), "nor does a request of no known size weigh anything")
	assert.Zero(t, l.backlog("other", 5, 100_000), "per destination")

	l.ended("k", at(1000))
	pause := at(1000).Add(refillWithin + time.Millisecond)
	l.arrived("k", pause)
	assert.Zero(t, l.backlog("k", 5, 100_000), "a pause breaks the loop")
	for i := range 2 {
		l.ended("k", pause.Add(time.Duration(i+1)*time.Millisecond))
		l.arrived("k", pause.Add(time.Duration(i+1)*time.Millisecond))
	}
	assert.EqualValues(t, 3*100_000, l.backlog("k", 5, 100_000), "and its count starts afresh")
}

// Each ended response is refilled once: a burst after a single end is
// one refill, and the rest of the burst breaks the run.
func TestClosedLoopEachEndRefilledOnce(t *testing.T) {
	var l closedLoops
	t0 := time.Now()
	for i := range 3 {
		l.ended("k", t0.Add(time.Duration(i)*time.Millisecond))
		l.arrived("k", t0.Add(time.Duration(i)*time.Millisecond+time.Microsecond))
	}
	require.EqualValues(t, 3, l.backlog("k", 5, 1))
	l.ended("k", t0.Add(5*time.Millisecond))
	l.arrived("k", t0.Add(6*time.Millisecond))
	l.arrived("k", t0.Add(6*time.Millisecond))
	assert.Zero(t, l.backlog("k", 5, 1), "the second request of the burst refilled nothing")
}

// What closedLoops keeps is bounded, whatever its callers send: ends per
// destination and destinations, a stale one making room for a new one.
func TestClosedLoopsBounded(t *testing.T) {
	var l closedLoops
	t0 := time.Now()
	for range 10 * maxLoopEnds {
		l.ended("k", t0)
	}
	assert.Len(t, l.dests["k"].ends, maxLoopEnds)
	for i := range 2 * maxLoopDests {
		l.arrived(fmt.Sprint("d", i), t0)
	}
	assert.Len(t, l.dests, maxLoopDests)
	l.arrived("late", t0.Add(loopForget+time.Second))
	assert.Contains(t, l.dests, "late", "the stale ones made room")
	assert.LessOrEqual(t, len(l.dests), maxLoopDests)
}

// The policy is asked with the guessed backlog where the pool's queue is
// empty, and with what really waits where it is not.
func TestDecisionWeighsAClosedLoopsBacklog(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	var queued []int64
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		queued = append(queued, req.Queued)
		d.Choices = append(d.Choices, Choice{Path: a, Fresh: true})
	}))
	c := poolWith(m, 6, 17, []*Path{a}, busyEntry(1, a), busyEntry(2, a), busyEntry(3, a))
	defer c.close()
	t0 := time.Now()
	for i := range 3 {
		c.sched.loops.ended("k", t0.Add(time.Duration(i)*time.Millisecond))
		c.sched.loops.arrived("k", t0.Add(time.Duration(i)*time.Millisecond+time.Microsecond))
	}

	var traced []DecisionInfo
	w := queuedWaiter(100_000)
	w.ctx = WithDecisionTrace(w.ctx, func(di DecisionInfo) { traced = append(traced, di) })
	c.mu.Lock()
	g, ok := c.sched.attempt(w, nil)
	c.mu.Unlock()
	require.True(t, ok)
	c.undo(g)
	assert.Equal(t, []int64{3 * 100_000}, queued, "three refills in a row, three others in flight")
	require.Len(t, traced, 1)
	assert.True(t, traced[0].QueueGuessed, "a trace tells a guess from what waits")
	assert.EqualValues(t, 3*100_000, traced[0].Queued)

	queued = nil
	first, behind := queuedWaiter(100_000), queuedWaiter(20_000)
	traced = nil
	first.ctx = w.ctx
	setQueue(c, first, behind)
	c.mu.Lock()
	g, ok = c.sched.attempt(first, nil)
	c.mu.Unlock()
	require.True(t, ok)
	require.NotEmpty(t, queued)
	assert.EqualValues(t, 20_000, queued[0], "what waits in the pool, not a guess")
	require.NotEmpty(t, traced)
	assert.False(t, traced[0].QueueGuessed)
	c.undo(g)
}

// The Transport tells the guess its responses' ends and its requests: a
// caller that keeps two requests in flight and sends the next as each
// ends is taken for a closed loop; one that sends its requests at once
// is not. Without a policy, which alone reads the guess, nothing is kept.
func TestTransportNoticesAClosedLoop(t *testing.T) {
	for _, tc := range []struct {
		name            string
		workers, rounds int
		loop, noPolicy  bool
	}{
		{"two in flight, refilled", 2, 4, true, false},
		{"eight at once", 8, 1, false, false},
		{"no policy to weigh it", 2, 4, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var arrived sync.WaitGroup
			arrived.Add(tc.workers) // the first round is in flight together
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/first" {
					arrived.Done()
					arrived.Wait()
				}
				fmt.Fprint(w, "body")
			}))
			defer srv.Close()
			tr := &Transport{}
			if !tc.noPolicy {
				m := loManager(t, PolicyFunc(func(*Request, *Decision) {}))
				defer m.Close()
				tr.Manager = m
			}
			defer tr.CloseIdleConnections()
			tr.init()
			tr.core.sched.loops.window = time.Minute // no refill is late, however slow the machine
			client := &http.Client{Transport: tr}
			var wg sync.WaitGroup
			for range tc.workers {
				wg.Go(func() {
					for i := range tc.rounds {
						path := "/next"
						if i == 0 {
							path = "/first"
						}
						resp, err := client.Get(srv.URL + path)
						if !assert.NoError(t, err) {
							return
						}
						_, err = io.Copy(io.Discard, resp.Body)
						assert.NoError(t, err)
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			var guess int64
			for k := range tr.core.sched.loops.dests {
				guess = max(guess, tr.core.sched.loops.backlog(k, 10, 1000))
			}
			if tc.loop {
				assert.EqualValues(t, 8*1000, guess, "a closed loop of eight requests, every one after the first two a refill")
			} else {
				assert.Zero(t, guess)
			}
			if tc.noPolicy {
				assert.Empty(t, tr.core.sched.loops.dests, "nothing kept where no policy reads it")
			}
		})
	}
}
