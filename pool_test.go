package intents

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/estimate"
	"github.com/sockintents/intents/internal/sockopt"
)

// lineServer answers each line with "N:line" where N counts connections,
// and reports each closed connection on closed.
type lineServer struct {
	l      net.Listener
	closed chan int
	mu     sync.Mutex
	n      int
	conns  []net.Conn
}

func startLineServer(t *testing.T) *lineServer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &lineServer{l: l, closed: make(chan int, 100)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.n++
			id := s.n
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			wg.Go(func() {
				defer func() { s.closed <- id }()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "%d:%s", id, line)
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *lineServer) addr() string { return s.l.Addr().String() }

// closeAll closes the server side of every connection so far.
func (s *lineServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

func ask(t *testing.T, c net.Conn, q string) string {
	t.Helper()
	_, err := fmt.Fprintf(c, "%s\n", q)
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	return line[:len(line)-1]
}

func testPool(t *testing.T) *Pool {
	p := &Pool{Manager: loManager(t, nil)}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPoolReuse(t *testing.T) {
	s := startLineServer(t)
	p := testPool(t)
	ctx := context.Background()
	c, reused, err := p.Get(ctx, "tcp", s.addr())
	require.NoError(t, err)
	assert.False(t, reused)
	assert.Equal(t, "1:a", ask(t, c, "a"))
	c.Release()
	c.Release() // a second release is harmless

	c, reused, err = p.Get(ctx, "tcp", s.addr())
	require.NoError(t, err)
	assert.True(t, reused)
	assert.Equal(t, "1:b", ask(t, c, "b"), "the same connection")
	assert.Equal(t, map[string]PathStats{"": {Active: 1, Reuses: 1, Dials: 1}}, p.Stats())
	c.Release()
	assert.Equal(t, map[string]PathStats{"": {Idle: 1, Reuses: 1, Dials: 1}}, p.Stats())
}

func TestPoolDiscardsDeadIdleConnections(t *testing.T) {
	s := startLineServer(t)
	p := testPool(t)
	c, _, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	ask(t, c, "a")
	c.Release()
	s.closeAll()
	<-s.closed // the server has closed it, so its FIN is in our socket

	c, reused, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	assert.False(t, reused, "the closed connection was not handed out")
	assert.Equal(t, "2:b", ask(t, c, "b"))
	c.Close()
}

func TestPoolPerHostLimitAndFIFO(t *testing.T) {
	s := startLineServer(t)
	p := &Pool{Manager: loManager(t, nil), MaxConnsPerHost: 2}
	defer p.Close()
	ctx := context.Background()
	a, _, err := p.Get(ctx, "tcp", s.addr())
	require.NoError(t, err)
	b, _, err := p.Get(ctx, "tcp", s.addr())
	require.NoError(t, err)

	// Three more wait, in order.
	p.init()
	queued := make(chan struct{})
	p.core.sched.testHookQueued = func() { queued <- struct{}{} }
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			c, reused, err := p.Get(ctx, "tcp", s.addr())
			if assert.NoError(t, err) {
				assert.True(t, reused)
				order <- i
				c.Release()
			}
		})
		<-queued
	}
	p.core.mu.Lock()
	p.core.sched.testHookQueued = nil
	p.core.mu.Unlock()
	a.Release() // one connection goes round the waiters; each passes it on
	wg.Wait()
	b.Release()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	assert.Equal(t, []int{0, 1, 2}, got, "waiters are served first come, first served")
	assert.EqualValues(t, 2, p.Stats()[""].Dials, "never more than the limit")
}

func TestPoolWaitEndsWithContext(t *testing.T) {
	s := startLineServer(t)
	p := &Pool{Manager: loManager(t, nil), MaxConnsPerHost: 1}
	defer p.Close()
	a, _, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p.init()
	p.core.sched.testHookQueued = cancel // give up as soon as it waits
	_, _, err = p.Get(ctx, "tcp", s.addr())
	assert.ErrorIs(t, err, context.Canceled)
	p.core.mu.Lock()
	p.core.sched.testHookQueued = nil
	assert.Empty(t, p.core.sched.queue.ws, "the cancelled request left the queue")
	p.core.mu.Unlock()
	a.Release()
	c, reused, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	assert.True(t, reused, "the slot is intact")
	c.Close()
}

func TestPoolTotalLimitClosesIdle(t *testing.T) {
	s1, s2 := startLineServer(t), startLineServer(t)
	p := &Pool{Manager: loManager(t, nil), MaxConns: 2}
	defer p.Close()
	ctx := context.Background()
	for range 2 {
		c, _, err := p.Get(ctx, "tcp", s1.addr())
		require.NoError(t, err)
		defer c.Release()
	}
	// Both are busy: a third host must wait for room.
	busyCtx, cancel := context.WithCancel(ctx)
	p.init()
	p.core.sched.testHookQueued = cancel
	_, _, err := p.Get(busyCtx, "tcp", s2.addr())
	require.ErrorIs(t, err, context.Canceled)
	p.core.mu.Lock()
	p.core.sched.testHookQueued = nil
	p.core.mu.Unlock()
}

func TestPoolTotalLimitMakesRoom(t *testing.T) {
	s1, s2 := startLineServer(t), startLineServer(t)
	p := &Pool{Manager: loManager(t, nil), MaxConns: 2}
	defer p.Close()
	ctx := context.Background()
	var cs []*PooledConn
	for range 2 {
		c, _, err := p.Get(ctx, "tcp", s1.addr())
		require.NoError(t, err)
		cs = append(cs, c)
	}
	cs[0].Release()
	cs[1].Release()
	c, reused, err := p.Get(ctx, "tcp", s2.addr())
	require.NoError(t, err)
	assert.False(t, reused)
	assert.Equal(t, "1:x", ask(t, c, "x"))
	c.Release()
	<-s1.closed // the longest idle connection to s1 was closed for it
	st := p.Stats()[""]
	assert.Equal(t, 2, st.Idle)
	assert.EqualValues(t, 3, st.Dials)
}

func TestPoolIdleTimeout(t *testing.T) {
	s := startLineServer(t)
	p := &Pool{Manager: loManager(t, nil), IdleTimeout: 20 * time.Millisecond}
	defer p.Close()
	c, _, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	ask(t, c, "a")
	c.Release()
	assert.Equal(t, 1, <-s.closed, "the idle connection was closed")
	assert.Equal(t, PathStats{Dials: 1}, p.Stats()[""])
}

func TestPoolClose(t *testing.T) {
	s := startLineServer(t)
	p := &Pool{Manager: loManager(t, nil), MaxConnsPerHost: 1}
	a, _, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	p.init()
	queued := make(chan struct{})
	p.core.sched.testHookQueued = func() { close(queued) }
	errc := make(chan error)
	go func() {
		_, _, err := p.Get(context.Background(), "tcp", s.addr())
		errc <- err
	}()
	<-queued
	require.NoError(t, p.Close())
	assert.ErrorIs(t, <-errc, errPoolClosed, "waiting requests fail")
	_, _, err = p.Get(context.Background(), "tcp", s.addr())
	assert.ErrorIs(t, err, net.ErrClosed, "as net says of what it closed")
	assert.Equal(t, "1:still", ask(t, a, "still"), "a handed-out connection stays usable")
	a.Close()
}

func TestPoolNoPath(t *testing.T) {
	p := testPool(t)
	p.Dialer = &Dialer{Control: tripwire(t)}
	ctx := WithIntents(context.Background(), Intents{Types: map[InterfaceType]Level{TypeLoopback: LevelProhibit}})
	_, _, err := p.Get(ctx, "tcp", "127.0.0.1:9")
	assert.ErrorIs(t, err, ErrNoPath)
	_, _, err = p.Get(context.Background(), "tcp", "192.0.2.1:9")
	assert.ErrorIs(t, err, ErrNoPath, "only loopback is configured")
}

func TestPoolTickWithSystemRoutedConnections(t *testing.T) {
	s := startLineServer(t)
	p := testPool(t)
	c, _, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	ask(t, c, "a")
	for range deliveryTicks + 1 {
		p.core.sampler.tick()
	}
	// Connections the OS routed have no path to estimate: no delivery
	// window is kept for them, and no path gains a rate.
	p.core.sampler.mu.Lock()
	assert.Empty(t, p.core.sampler.windows)
	p.core.sampler.mu.Unlock()
	for _, path := range p.Manager.Paths() {
		assert.Zero(t, path.Estimate().Rate, path.Name)
	}
	assert.Equal(t, "1:b", ask(t, c, "b"), "the connection still serves")
	c.Release()
}

// fakeConn is a pooled connection without a socket.
type fakeConn struct{ busy, closed bool }

func (f *fakeConn) available() int {
	if f.busy || f.closed {
		return 0
	}
	return 1
}
func (f *fakeConn) inFlight() int {
	if f.busy {
		return 1
	}
	return 0
}
func (f *fakeConn) reserve() bool    { ok := !f.busy && !f.closed; f.busy = true; return ok }
func (f *fakeConn) unreserve()       { f.busy = false }
func (f *fakeConn) dead() bool       { return f.closed }
func (f *fakeConn) close() error     { return nil }
func (f *fakeConn) ownReader() bool  { return false }
func (f *fakeConn) carrier() carrier { return carrierWhole }
func (f *fakeConn) requests() int    { return f.inFlight() }

// fakePath is a wired path with one address.
func fakePath(name, addr string) *Path {
	return &Path{Name: name, Type: TypeWired, Up: true, Addrs: []netip.Addr{netip.MustParseAddr(addr)}}
}

// busyEntry is a connection of destination "k" on p with a request in
// flight.
func busyEntry(id uint64, p *Path) *entry {
	return &entry{id: id, key: "k", path: p, c: &fakeConn{busy: true}, created: time.Now(), lastUsed: time.Now()}
}

// granted returns what w was sent, failing t if it was sent nothing.
func granted(t *testing.T, w *waiter, msgAndArgs ...any) grant {
	t.Helper()
	select {
	case g := <-w.ch:
		return g
	default:
		require.Fail(t, "nothing granted", msgAndArgs...)
		return grant{}
	}
}

// setQueue makes ws, in this order, the waiters of c.
func setQueue(c *core, ws ...*waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.sched.queue.ws {
		w.inQueue = false
	}
	c.sched.queue.ws = nil
	for _, w := range ws {
		c.sched.queue.push(w)
	}
}

// poolWith is a pool over paths, asking m's policy, with es open to
// destination "k".
func poolWith(m *Manager, perHost, total int, paths []*Path, es ...*entry) *core {
	m.paths.Store(&paths)
	c := newCore(m, coreConfig{limits: limits{maxPerHost: perHost, maxTotal: total, idleTimeout: time.Minute}})
	c.reg.entries["k"] = es
	c.reg.total = len(es)
	return c
}

var testDest = Destination{Network: "tcp", Host: "192.0.2.1", Port: 80}

// queuedWaiter is a request for destination "k" expecting size bytes.
func queuedWaiter(size int64) *waiter {
	return &waiter{connRequest: connRequest{key: "k", dest: testDest, in: Intents{SizeToBeReceived: size}}, ctx: context.Background(), ch: make(chan grant, 1)}
}

// A choice that closes an idle connection to make room, followed by one
// that reuses another, must see the pool as it is after the close (here:
// the connection it names is the one just closed, so it waits).
func TestTryAfterClosingForAFreshChoice(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	b := fakePath("b", "10.9.1.1")
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		last := &req.Candidates[len(req.Candidates)-1]
		d.Choices = append(d.Choices, Choice{Path: b, Fresh: true}, Choice{Reuse: last})
	}))
	old := time.Now().Add(-time.Minute)
	e1 := &entry{id: 1, key: "k", path: a, c: &fakeConn{}, created: old, lastUsed: time.Now()}
	e2 := &entry{id: 2, key: "k", path: a, c: &fakeConn{}, created: old, lastUsed: old}
	c := poolWith(m, 2, 1, []*Path{a, b}, e1, e2) // the total limit stays hit after one close
	w := queuedWaiter(0)
	c.mu.Lock()
	_, ok := c.sched.attempt(w, nil)
	c.mu.Unlock()
	assert.False(t, ok, "the connection it wanted is gone: wait")
	assert.True(t, e2.removed, "the longest idle one was closed for the fresh choice")
	assert.Equal(t, []*entry{e1}, c.reg.entries["k"])
}

// A fresh choice on one path at the host limit closes even the only idle
// connection on another path: it would otherwise hold the slot the policy
// wants for its path. So does a choice of a connection on a path (not
// Fresh) where that path has none free: with the host's limit held by an
// idle connection on another path, nothing else would ever free a slot,
// and the request would wait until its context ended.
func TestChoiceClosesTheLastIdleOfAnotherPath(t *testing.T) {
	for _, fresh := range []bool{true, false} {
		a := fakePath("a", "10.9.0.1")
		b := fakePath("b", "10.9.1.1")
		m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
			d.Choices = append(d.Choices, Choice{Path: b, Fresh: fresh})
		}))
		e := &entry{id: 1, key: "k", path: a, c: &fakeConn{}, created: time.Now(), lastUsed: time.Now()}
		c := poolWith(m, 1, 17, []*Path{a, b}, e)
		w := queuedWaiter(0)
		c.mu.Lock()
		g, ok := c.sched.attempt(w, nil)
		c.mu.Unlock()
		require.True(t, ok, "fresh %v: granted, not left waiting", fresh)
		assert.True(t, g.dials(), "a new connection")
		assert.Equal(t, b, g.slot.path, "on the path the policy wants")
		assert.True(t, e.removed, "the idle one on the other path made room")
		c.undo(g)
	}
}

// At the host's limit a new connection on a path that has some already
// takes the slot of an idle one elsewhere only where that evens the paths
// out: from a path holding at least two more. A policy that places each
// request on its own would otherwise trade connections back and forth as
// a page's small and large objects alternate, a handshake and a slow
// start each time. As a last resort, with no other choice to be had, any
// idle one makes room: else nothing would ever free a slot. So does one
// that never carried a request (a spare the policy did not choose): it
// has no window to lose.
func TestReplacingEvensThePathsOut(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	b := fakePath("b", "10.9.1.1")
	for _, tc := range []struct {
		name     string
		onA, onB int  // busy connections on each path, beside one idle on b
		fallback bool // the decision names a busy connection on a after the new one
		replaced bool
	}{
		{"a holds as many", 2, 1, true, false},
		{"b holds two more", 1, 2, true, true},
		{"a holds as many, nothing else to be had", 2, 1, false, true},
		{"a holds as many, b's idle one never used", 2, 1, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
				d.Choices = append(d.Choices, Choice{Path: a, Fresh: true})
				for i := range req.Candidates {
					if c := &req.Candidates[i]; tc.fallback && c.Path == a {
						d.Choices = append(d.Choices, Choice{Reuse: c})
					}
				}
			}))
			c, idle := poolIdleOnB(m, a, b, tc.onA, tc.onB)
			idle.spare = strings.Contains(tc.name, "never used")
			w := queuedWaiter(100_000)
			c.mu.Lock()
			g, ok := c.sched.attempt(w, nil)
			c.mu.Unlock()
			assert.Equal(t, tc.replaced, idle.removed, "the idle connection on b closed")
			assert.Equal(t, tc.replaced, ok && g.dials(), "a new connection on a")
			if ok {
				assert.Equal(t, a, g.slot.path)
				c.undo(g)
			}
		})
	}
}

// poolIdleOnB is a pool over paths a and b at its host's limit, with
// onA busy connections on a and onB on b, and one idle on b, which it
// returns.
func poolIdleOnB(m *Manager, a, b *Path, onA, onB int) (*core, *entry) {
	var es []*entry
	for i := range onA {
		es = append(es, busyEntry(uint64(1+i), a))
	}
	for i := range onB {
		es = append(es, busyEntry(uint64(10+i), b))
	}
	idle := &entry{id: 20, key: "k", path: b, c: &fakeConn{}, created: time.Now(), lastUsed: time.Now()}
	es = append(es, idle)
	return poolWith(m, len(es), 17, []*Path{a, b}, es...), idle
}

// A waiter behind one that chose to wait for a busy connection may make
// room as the first in line may: the one ahead has passed over the idle
// connection already. Traced (a page of 32 × 100 kB over 6 Mbit/s at 20 ms
// and 20 Mbit/s at 200 ms): the first in line waited for the one
// connection on the 200 ms path, the next one's policy wanted a second
// there, and not being first it took the idle connection on the 20 ms
// path, holding five, instead; the 200 ms path got its second 0.6 to
// 1.3 s into the load.
func TestAWaiterBehindAChosenWaitMakesRoom(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	b := fakePath("b", "10.9.1.1")
	for _, tc := range []struct {
		name     string
		busyOnB  int // beside one idle there, and one busy on a
		replaced bool
	}{
		{"b holds two more", 2, true},
		{"b holds one more: the paths stay as they are", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
				if req.Intents.SizeToBeReceived == 1 { // the first in line: a's busy one
					for i := range req.Candidates {
						if c := &req.Candidates[i]; c.Path == a {
							d.Choices = append(d.Choices, Choice{Reuse: c})
						}
					}
					return
				}
				d.Choices = append(d.Choices, Choice{Path: a, Fresh: true})
				for i := range req.Candidates {
					d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
				}
			}))
			c, idle := poolIdleOnB(m, a, b, 1, tc.busyOnB)
			first, second := queuedWaiter(1), queuedWaiter(100_000)
			setQueue(c, first, second)
			c.sched.serve()
			assert.Equal(t, tc.replaced, idle.removed, "the idle connection on b closed")
			if !tc.replaced {
				assert.Equal(t, []*waiter{first, second}, c.sched.queue.ws, "both wait for a's busy connection")
				return
			}
			g := granted(t, second, "the second in line got nothing")
			assert.True(t, g.dials(), "a new connection on a")
			assert.Equal(t, a, g.slot.path)
			assert.Equal(t, []*waiter{first}, c.sched.queue.ws, "the first waits for a's busy connection")
			c.undo(g)
		})
	}
}

// A choice of a connection on a path (not Fresh) followed by the other
// paths as fallbacks, as RoundRobin's, takes a free connection on a later
// one before it closes anything: an idle connection on a is reused, not
// closed for a new one on b (which put half of a page over round robin on
// the slower path: 2.8 s where it takes 1.3).
func TestPathChoiceFallsBackBeforeClosing(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	b := fakePath("b", "10.9.1.1")
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		d.Choices = append(d.Choices, Choice{Path: b}, Choice{Path: a})
	}))
	busy := &entry{id: 1, key: "k", path: b, c: &fakeConn{busy: true}, created: time.Now(), lastUsed: time.Now()}
	idle := &entry{id: 2, key: "k", path: a, c: &fakeConn{}, created: time.Now(), lastUsed: time.Now()}
	c := poolWith(m, 2, 17, []*Path{a, b}, busy, idle)
	w := queuedWaiter(0)
	c.mu.Lock()
	g, ok := c.sched.attempt(w, nil)
	c.mu.Unlock()
	require.True(t, ok)
	assert.Equal(t, idle, g.e, "the free connection on the fallback path")
	assert.False(t, idle.removed)
	c.undo(g)
}

// At the host's limit, with every connection on path a, a waiter whose
// policy wants a new connection on the unused path b gets the next
// connection to go idle (closed, for b's), before the waiters ahead of it
// that the policy keeps on a.
func TestAWaiterForAnUnusedPathTakesTheNextIdleSlot(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	b := fakePath("b", "10.9.1.1")
	var wantB atomic.Bool
	wantB.Store(true)
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		if req.Intents.SizeToBeReceived > 1000 && wantB.Load() {
			d.Choices = append(d.Choices, Choice{Path: b, Fresh: true})
		}
		for i := range req.Candidates { // any connection on a, the free ones first
			if req.Candidates[i].Available > 0 {
				d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
			}
		}
		for i := range req.Candidates {
			d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
		}
	}))
	e1 := busyEntry(1, a)
	e2 := busyEntry(2, a)
	c := poolWith(m, 2, 17, []*Path{a, b}, e1, e2)
	small := queuedWaiter(1000)
	large := queuedWaiter(100_000)
	setQueue(c, small, large)
	c.sched.serve()
	require.Len(t, c.sched.queue.ws, 2, "no room, nothing free: both wait")
	e2.c.(*fakeConn).busy = false
	c.sched.serve()
	g := granted(t, large, "the large request still waits; waiters: %d", len(c.sched.queue.ws))
	assert.True(t, g.dials(), "the large request opens path b")
	assert.Equal(t, b, g.slot.path)
	assert.True(t, e2.removed, "in the slot of the connection that went idle")
	assert.Equal(t, []*waiter{small}, c.sched.queue.ws, "the small one waits for a's next")
	c.undo(g)

	// Once the policy no longer wants b first, the waiter gets no head
	// start: the connection that goes idle is the first in line's.
	wantB.Store(false)
	e3 := busyEntry(3, a)
	c.reg.entries["k"] = []*entry{e1, e3}
	c.reg.total = 2
	small2 := queuedWaiter(1000)
	setQueue(c, small2, large)
	large.wantsPath = b // as its last decision had it
	e3.c.(*fakeConn).busy = false
	c.sched.serve()
	g = granted(t, small2, "the first in line did not get the idle connection")
	assert.Same(t, e3, g.e)
	assert.Equal(t, []*waiter{large}, c.sched.queue.ws)
}

// A request waiting for one busy connection takes another on the same
// path that frees up first, before a request behind it can: as net/http
// hands out connections in queue order, and so that it does not wait
// behind a long transfer while the one behind it takes the free one.
func TestAWaiterTakesAFreeConnectionOnItsPathInQueueOrder(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		// Always connection 1 first (as a policy that predicted it frees
		// soonest), then the others.
		for i := range req.Candidates {
			if req.Candidates[i].ID == 1 {
				d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
			}
		}
		for i := range req.Candidates {
			if req.Candidates[i].ID != 1 {
				d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
			}
		}
	}))
	e1 := busyEntry(1, a)
	e2 := busyEntry(2, a)
	c := poolWith(m, 2, 17, []*Path{a}, e1, e2)
	first := queuedWaiter(0)
	second := queuedWaiter(0)
	setQueue(c, first, second)
	c.sched.serve()
	require.Len(t, c.sched.queue.ws, 2)
	assert.Same(t, e1, first.wants)
	e2.c.(*fakeConn).busy = false
	c.sched.serve()
	g := granted(t, first, "the first request still waits for connection 1")
	assert.Same(t, e2, g.e, "the free connection, not a wait behind connection 1")
	assert.Equal(t, []*waiter{second}, c.sched.queue.ws)
	c.undo(g)
}

// While nothing can be had (no room, no free connection), the waiters'
// last decisions stand: changes on the pool do not ask the policy again
// for each of them (a page of 50 requests took 2,000 decisions a load).
func TestHopelessWaitersAreNotAskedAgain(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	var asked atomic.Int64
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		asked.Add(1)
		for i := range req.Candidates {
			d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
		}
	}))
	busy := busyEntry(1, a)
	c := poolWith(m, 1, 17, []*Path{a}, busy)
	var ws []*waiter
	for range 10 {
		ws = append(ws, queuedWaiter(0))
	}
	setQueue(c, ws...)
	for range 5 {
		c.sched.serve() // as on every change of a busy connection
	}
	assert.EqualValues(t, 10, asked.Load(), "each asked once")
	busy.c.(*fakeConn).busy = false
	c.sched.serve()
	assert.Len(t, c.sched.queue.ws, 9, "the first in line got the connection that freed")
	assert.Greater(t, asked.Load(), int64(10), "asked again once something could be had")
}

// A waiter the policy has wait for a busy connection does not hold up
// those behind it that the policy sends elsewhere; one that wants the same
// connection waits behind it, and sees it waiting there.
func TestWaiterForABusyConnectionLetsOthersPass(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	var seenWaiting []int
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		// Small requests wait for connection 1; large ones want a new one.
		if req.Intents.SizeToBeReceived < 1000 {
			for i := range req.Candidates {
				if req.Candidates[i].ID == 1 {
					seenWaiting = append(seenWaiting, req.Candidates[i].Waiting)
					d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
				}
			}
			return
		}
		d.Choices = append(d.Choices, Choice{Path: a, Fresh: true})
	}))
	busy := busyEntry(1, a)
	c := poolWith(m, 6, 17, []*Path{a}, busy)
	small1 := queuedWaiter(10)
	small2 := queuedWaiter(20)
	large := queuedWaiter(5000)
	setQueue(c, small1, small2, large)
	c.sched.serve()
	assert.Equal(t, []*waiter{small1, small2}, c.sched.queue.ws, "the large request went its own way")
	g := <-large.ch
	assert.True(t, g.dials(), "a new connection for it")
	c.undo(g)
	assert.Same(t, busy, small1.wants)
	assert.Same(t, busy, small2.wants)
	assert.Contains(t, seenWaiting, 1, "the second small request saw the first waiting")

	// The connection frees up: the first in line gets it.
	busy.c.(*fakeConn).busy = false
	c.sched.serve()
	g = <-small1.ch
	assert.Same(t, busy, g.e)
	assert.Equal(t, []*waiter{small2}, c.sched.queue.ws)
}

// reuseAnyThenNewOn is a policy that wants every candidate, busy or not,
// in turn, then a new connection on p.
func reuseAnyThenNewOn(p *Path) Policy {
	return PolicyFunc(func(req *Request, d *Decision) {
		for i := range req.Candidates {
			d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
		}
		d.Choices = append(d.Choices, Choice{Path: p, Fresh: true})
	})
}

// A request the policy has wait for a busy connection that never frees up
// (its body held unread, perhaps by the waiting caller itself) takes the
// policy's next choice after maxWaitForBusy, when a new connection could
// be had.
func TestWaitForABusyConnectionEnds(t *testing.T) {
	defer func(d time.Duration) { maxWaitForBusy = d }(maxWaitForBusy)
	maxWaitForBusy = 20 * time.Millisecond
	a := fakePath("a", "10.9.0.1")
	m := loManager(t, reuseAnyThenNewOn(a))
	held := busyEntry(1, a)
	c := poolWith(m, 6, 17, []*Path{a}, held)
	g, err := c.sched.wait(context.Background(), connRequest{key: "k", dest: testDest}, nil)
	require.NoError(t, err)
	assert.True(t, g.dials(), "a new connection, the held one never freed")
	c.undo(g)

	// At the host limit there is nothing else to do but wait.
	c2 := poolWith(m, 1, 17, []*Path{a}, busyEntry(1, a))
	queued := make(chan struct{})
	c2.sched.testHookQueued = func() { close(queued) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := c2.sched.wait(ctx, connRequest{key: "k", dest: testDest}, nil)
		done <- err
	}()
	<-queued
	c2.mu.Lock()
	armed := c2.sched.queue.ws[0].timer != nil
	c2.mu.Unlock()
	assert.False(t, armed, "no timer at the limit")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// A grant given back unused (its waiter's context ended as it was handed
// over) frees the slot it reserved.
func TestUndoGivesTheSlotBack(t *testing.T) {
	c := newCore(nil, coreConfig{limits: limits{maxPerHost: 6, maxTotal: 17, idleTimeout: time.Minute}})
	e := &entry{id: 1, key: "k", c: &fakeConn{}, created: time.Now(), lastUsed: time.Now()}
	c.reg.entries["k"] = []*entry{e}
	c.reg.total = 1
	w := &waiter{connRequest: connRequest{key: "k", in: Intents{SizeToBeReceived: 500}}, ctx: context.Background()}
	c.mu.Lock()
	g, ok := c.sched.reserve(w, e, time.Now())
	c.mu.Unlock()
	require.True(t, ok)
	assert.Zero(t, e.c.available(), "reserved")
	assert.EqualValues(t, 500, e.pending.Load())
	c.undo(g)
	assert.Equal(t, 1, e.c.available(), "free again")
	assert.Zero(t, e.pending.Load())
}

// A policy that answers with a pointer to a copy of a candidate (a loop
// variable's address) still reuses the connection it meant. The
// destination is one the policy decides (not loopback, which the operating
// system routes without asking it).
func TestReuseOfACandidateCopy(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	var asked int
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		asked++
		for _, c := range req.Candidates {
			if c.Available > 0 {
				d.Choices = append(d.Choices, Choice{Reuse: &c})
			}
		}
		d.Choices = append(d.Choices, Choice{Path: req.Paths[0], Fresh: true})
	}))
	busy, free := busyEntry(1, a), busyEntry(2, a)
	free.c.(*fakeConn).busy = false
	c := poolWith(m, 6, 17, []*Path{a}, busy, free)
	defer c.close()
	g, err := c.sched.wait(context.Background(), connRequest{key: "k", dest: testDest}, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, asked, "the policy decided")
	assert.Same(t, free, g.e, "the copy's ID named the free connection")
	c.undo(g)
}

// The policy runs outside the pool's lock: one that looks at the pool
// (here its statistics, which take the lock) does not deadlock it.
func TestPolicyRunsOutsideThePoolLock(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	var c *core
	var asked int
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		asked++
		_ = c.pathStats()
		d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[0]})
	}))
	free := busyEntry(1, a)
	free.c.(*fakeConn).busy = false
	c = poolWith(m, 6, 17, []*Path{a}, free)
	within(t, "a request whose policy reads the pool's statistics", func() {
		g, err := c.sched.wait(context.Background(), connRequest{key: "k", dest: testDest}, nil)
		if assert.NoError(t, err) {
			assert.Same(t, free, g.e)
			c.undo(g)
		}
	})
	assert.Equal(t, 1, asked, "the policy decided")
	c.close() // not deferred: after a deadlock it would wait for the lock too
}

// A choice is checked against the pool as it is once the policy returns:
// a connection chosen free but taken while the policy decided is not
// handed out twice, nor waited for; the policy decides again, on the pool
// as it now is.
func TestAChoiceTakenMeanwhileIsDecidedAgain(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	var e *entry
	var asked []int // Available of the candidate, per decision
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		cand := &req.Candidates[0]
		asked = append(asked, cand.Available)
		if cand.Available > 0 {
			require.True(t, e.c.reserve(), "another request takes it while the policy decides")
			d.Choices = append(d.Choices, Choice{Reuse: cand})
			return
		}
		d.Choices = append(d.Choices, Choice{Path: a, Fresh: true})
	}))
	e = &entry{id: 1, key: "k", path: a, c: &fakeConn{}, created: time.Now(), lastUsed: time.Now()}
	c := poolWith(m, 6, 17, []*Path{a}, e)
	c.mu.Lock()
	g, ok := c.sched.attempt(queuedWaiter(0), nil)
	c.mu.Unlock()
	require.True(t, ok)
	assert.Equal(t, []int{1, 0}, asked, "decided again, on the pool as it is")
	assert.True(t, g.dials(), "a new connection, as the second decision had it")
	assert.Equal(t, a, g.slot.path)
	c.undo(g)
}

// measureOthers measures the request's other permitted paths that have no
// RTT yet, one measurement per path at a time, and none of the path dialed,
// of a path measured already, or of a path the request may not use (not in
// permitted).
func TestMeasureOthers(t *testing.T) {
	path := func(name string, rtt time.Duration) *Path {
		p := &Path{Name: name, Up: true, est: estimate.New(0, 0)}
		if rtt > 0 {
			p.est.AddRTT(rtt)
		}
		return p
	}
	dialed, unknown, known, down := path("dialed", 0), path("unknown", 0), path("known", 20*time.Millisecond), path("down", 0)
	down.Up = false
	release := make(chan struct{})
	var mu sync.Mutex
	var measured []string
	c := newCore(nil, coreConfig{measure: func(ctx context.Context, p *Path, dest Destination) {
		mu.Lock()
		measured = append(measured, p.Name)
		mu.Unlock()
		<-release
	}})
	slot := dialSlot{path: dialed, dest: testDest, permitted: []*Path{dialed, unknown, known, down}}
	c.health.measureOthers(slot, nil)
	c.health.measureOthers(slot, nil) // while the first is under way: nothing more
	close(release)
	c.health.runs.Wait()
	assert.Equal(t, []string{"unknown"}, measured, "a prohibited path is not in permitted, so never measured")
	c.close()
}

// A Transport's pool opens, with a destination's first connection, an idle
// spare connection on each other path the request may use and would not
// rather avoid, within the limits; where it cannot (limits, cost, the
// request's avoidance), a path that has no RTT yet is measured with a bare
// handshake instead. The destination's later connections warm nothing.
func TestWarmOthers(t *testing.T) {
	path := func(name string) *Path {
		return &Path{Name: name, Type: TypeWired, Up: true, est: estimate.New(0, 0)}
	}
	dialed, spare, costly, avoided := path("dialed"), path("spare"), path("costly"), path("avoided")
	costly.Expensive = true
	permitted := []*Path{dialed, spare, costly, avoided}
	in := Intents{Interfaces: map[string]Level{"avoided": LevelAvoid}}
	// dialOnce has c dial a request's own connection on dialed, and
	// returns the paths it opened spares on meanwhile.
	dialOnce := func(c *core) (warmed []string) {
		var mu sync.Mutex
		c.mu.Lock()
		s := c.reg.takeDialSlot("k", testDest, permitted, Choice{Path: dialed}, 0)
		c.mu.Unlock()
		c.health.prepareOthers(s, &in, func(ctx context.Context, ch Choice) (pooled, net.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			warmed = append(warmed, ch.Path.Name)
			return &fakeConn{}, nil, nil
		})
		c.health.runs.Wait()
		c.mu.Lock()
		c.reg.endDial(s, false)
		c.mu.Unlock()
		return warmed
	}
	run := func(t *testing.T, l limits) (c *core, warmed, measured []string) {
		var mu sync.Mutex
		c = newCore(nil, coreConfig{limits: l, warm: true, measure: func(ctx context.Context, p *Path, dest Destination) {
			mu.Lock()
			defer mu.Unlock()
			measured = append(measured, p.Name)
		}})
		warmed = dialOnce(c)
		slices.Sort(measured)
		return c, warmed, measured
	}

	t.Run("room", func(t *testing.T) {
		c, warmed, measured := run(t, limits{maxPerHost: 6, idleTimeout: time.Minute})
		defer c.close()
		assert.Equal(t, []string{"spare"}, warmed)
		assert.Equal(t, []string{"avoided", "costly"}, measured, "no spare where it costs or is avoided: a bare handshake")
		c.mu.Lock()
		es := slices.Clone(c.reg.entries["k"])
		total := c.reg.total
		c.mu.Unlock()
		require.Len(t, es, 1)
		assert.Equal(t, "spare", es[0].path.Name)
		assert.False(t, es[0].idleSince.IsZero(), "idle from the start")
		assert.Equal(t, 1, total, "the spare counts in the limits")
		assert.Zero(t, spare.Estimate().Active, "nor is it load on its path")

		// The destination has a connection now: its next one warms nothing.
		assert.Empty(t, dialOnce(c))
	})
	t.Run("at the host limit", func(t *testing.T) {
		c, warmed, measured := run(t, limits{maxPerHost: 1, idleTimeout: time.Minute})
		defer c.close()
		assert.Empty(t, warmed, "the request's own dial fills the limit")
		assert.Equal(t, []string{"avoided", "costly", "spare"}, measured)
	})
	t.Run("no idle connections kept", func(t *testing.T) {
		c, warmed, measured := run(t, limits{idlePerHost: -1, idleTimeout: time.Minute})
		defer c.close()
		assert.Empty(t, warmed, "a spare would be closed as soon as it was open")
		assert.Equal(t, []string{"avoided", "costly", "spare"}, measured)
	})
}

// A request whose size is its origin's mean is decided with the mean as it
// is when the policy is asked, not as it was when the request came: the
// responses in between teach more. So are the requests queued behind it.
func TestOriginMeanAtDecisionTime(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	var sizes, queued []int64
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		sizes = append(sizes, req.Intents.SizeToBeReceived)
		queued = append(queued, req.Queued)
		d.Choices = append(d.Choices, Choice{Path: a, Fresh: true})
	}))
	c := poolWith(m, 6, 17, []*Path{a})
	mean := int64(10_000) // the root's, when the requests came
	c.sched.originSize = func(origin string) (int64, sizeSource) {
		if origin != "o" {
			return 0, ""
		}
		return mean, sizeFromOrigin
	}
	first, behind := queuedWaiter(10_000), queuedWaiter(10_000)
	first.sizeOrigin, behind.sizeOrigin = "o", "o"
	setQueue(c, first, behind)
	mean = 100_000 // the first objects' headers are in
	c.mu.Lock()
	g, ok := c.sched.attempt(first, nil)
	c.mu.Unlock()
	require.True(t, ok)
	assert.Equal(t, []int64{100_000}, sizes, "the mean as it is now")
	assert.Equal(t, []int64{100_000}, queued, "the request behind it too")
	assert.EqualValues(t, 100_000, g.size, "counted as pending")
	c.undo(g)
}

// The grant is logged at the size the request was granted at, which its
// origin's median may have changed while it waited (see
// TestOriginMeanAtDecisionTime), not the one it came with.
func TestGrantLoggedAtTheGrantedSize(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	in := Intents{SizeToBeReceived: 10_000}
	logGrant(context.Background(), log, &in, grant{e: busyEntry(3, fakePath("a", "10.9.0.1")), size: 1_000}, time.Now())
	assert.Contains(t, buf.String(), `intents="recv=1KB" got="reuse #3 on a"`)
	assert.EqualValues(t, 10_000, in.SizeToBeReceived, "the request's own intents stay")
}

// When a path goes down, its connections leave the pool: one whose
// request cannot move stays with it, open, until it ends (its errors are
// a PathDownError), an idle one closes; an MPTCP one stays in the pool
// while another path is up: its subflows there carry it on. With no path
// left up, it leaves too.
func TestPathDownLeavesMPTCPToItsSubflows(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	b := fakePath("b", "10.9.1.1")
	m := loManager(t, nil)
	plain, multi := busyEntry(1, a), busyEntry(2, a)
	multi.mptcp = true
	c := poolWith(m, 0, 0, []*Path{a, b}, plain, multi)
	defer c.close()
	aDown := *a
	aDown.Up = false
	m.paths.Store(&[]*Path{&aDown, b})
	c.drainGonePaths()
	c.mu.Lock()
	assert.True(t, plain.removed, "out of the pool")
	assert.True(t, plain.fate.stayed.Load(), "left to its request, which cannot move")
	assert.False(t, multi.removed, "the MPTCP connection goes on over path b")
	c.mu.Unlock()

	bDown := *b
	bDown.Up = false
	m.paths.Store(&[]*Path{&aDown, &bDown})
	c.drainGonePaths()
	c.mu.Lock()
	assert.True(t, multi.removed, "no path left for its subflows")
	c.mu.Unlock()
}

// The bound on a wait for a busy connection holds when the policy turns
// to another busy connection meanwhile: the timer armed for the first
// ends the wait for the second. A timer that did nothing for a waiter
// waiting for another connection would leave it waiting for the second
// for as long as that stays busy, for ever if the caller itself held its
// body.
func TestWaitForABusyConnectionEndsAfterTheChoiceChanged(t *testing.T) {
	defer func(d time.Duration) { maxWaitForBusy = d }(maxWaitForBusy)
	maxWaitForBusy = 20 * time.Millisecond
	a := fakePath("a", "10.9.0.1")
	var want atomic.Uint64
	want.Store(1)
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		for i := range req.Candidates {
			if req.Candidates[i].ID == want.Load() {
				d.Choices = append(d.Choices, Choice{Reuse: &req.Candidates[i]})
			}
		}
		d.Choices = append(d.Choices, Choice{Path: a, Fresh: true})
	}))
	c := poolWith(m, 6, 17, []*Path{a}, busyEntry(1, a), busyEntry(2, a))
	w := queuedWaiter(100)
	setQueue(c, w)
	c.sched.serve()
	c.mu.Lock()
	require.Equal(t, uint64(1), w.wants.id, "it waits for connection 1")
	c.mu.Unlock()

	want.Store(2) // the policy now prefers connection 2, still busy
	c.sched.serve()
	c.mu.Lock()
	require.Equal(t, uint64(2), w.wants.id)
	c.mu.Unlock()

	select {
	case g := <-w.ch:
		assert.True(t, g.dials(), "a new connection: neither busy one freed")
		c.undo(g)
	case <-time.After(10 * time.Second): // far beyond the bound: the wait did not end
		require.Fail(t, "still waiting for connection 2")
	}
}

// The bound on waiting for busy connections is on the whole wait: once a
// request has waited it out for one, it does not wait again for the next
// busy connection its policy names (each held unread by its caller, as a
// page's bodies may be, would otherwise add a bound of its own) but takes
// the first choice that is not a busy connection.
func TestWaitForBusyConnectionsIsBoundedInAll(t *testing.T) {
	defer func(d time.Duration) { maxWaitForBusy = d }(maxWaitForBusy)
	maxWaitForBusy = 20 * time.Millisecond
	a := fakePath("a", "10.9.0.1")
	m := loManager(t, reuseAnyThenNewOn(a))
	c := poolWith(m, 6, 17, []*Path{a}, busyEntry(1, a), busyEntry(2, a), busyEntry(3, a))
	defer c.close()
	w := queuedWaiter(100)
	setQueue(c, w)
	c.sched.serve()
	c.mu.Lock()
	require.NotNil(t, w.wants, "it waits for a busy connection")
	require.NotNil(t, w.timer, "for at most maxWaitForBusy")
	// A second wait, were one armed, would last for ever.
	maxWaitForBusy = time.Hour
	c.mu.Unlock()

	select {
	case g := <-w.ch:
		assert.True(t, g.dials(), "a new connection once the first wait ran out")
		c.undo(g)
	case <-time.After(10 * time.Second): // far beyond the bound
		require.Fail(t, "waiting for another busy connection")
	}
}

// The pool reads a new connection's MPTCP state (a getsockopt) before it
// takes its lock, as it makes every other system call outside it.
func TestMPTCPStateIsReadOutsideThePoolLock(t *testing.T) {
	s := startLineServer(t)
	p := testPool(t)
	p.init()
	var calls, underLock atomic.Int32
	defer func(f func(net.Conn) bool) { mptcpOf = f }(mptcpOf)
	mptcpOf = func(c net.Conn) bool {
		calls.Add(1)
		if p.core.mu.TryLock() {
			p.core.mu.Unlock()
		} else {
			underLock.Add(1)
		}
		return sockopt.IsMPTCP(c)
	}
	c, _, err := p.Get(context.Background(), "tcp", s.addr())
	require.NoError(t, err)
	c.Close()
	assert.Positive(t, calls.Load(), "read for the new connection")
	assert.Zero(t, underLock.Load(), "read under the pool's lock")
}

// The path health starts no background work once its pool has closed: a
// spare connection whose place was taken as the pool closed is not dialed
// and gives its place back, and a path's RTT is not measured (its probe
// mark is given back for a later pool). Close has waited for the work
// started before it; work started after would race that wait.
func TestPathHealthStartsNothingAfterClose(t *testing.T) {
	p := &Path{Name: "b", Up: true, est: estimate.New(0, 0)}
	dialed := false
	c := newCore(nil, coreConfig{limits: limits{maxPerHost: 6}, measure: func(context.Context, *Path, Destination) { dialed = true }})
	c.mu.Lock()
	s := c.reg.takeDialSlot("k", testDest, []*Path{p}, Choice{Path: p, Fresh: true}, 0)
	c.mu.Unlock()
	c.close()
	c.health.openSpare(s, time.Second, func(context.Context, Choice) (pooled, net.Conn, error) {
		dialed = true
		return &fakeConn{}, nil, nil
	})
	c.health.measureOthers(dialSlot{path: &Path{Name: "a"}, dest: testDest, permitted: []*Path{p}}, nil)
	c.health.runs.Wait()
	assert.False(t, dialed, "nothing dialed or measured after close")
	c.mu.Lock()
	assert.Zero(t, c.reg.total, "the spare's place is given back")
	assert.Empty(t, c.reg.dialing)
	c.mu.Unlock()
	assert.True(t, p.est.StartProbe(), "the path's probe mark is given back")
}

// closeWatched is a fakeConn that says when it is closed.
type closeWatched struct {
	*fakeConn
	closes chan string
	name   string
}

func (c closeWatched) close() error { c.closes <- c.name; return nil }

// On a path that went down, what loses nothing by closing closes (an idle
// connection, a request that is sent again elsewhere); a connection whose
// request cannot move stays with it, out of the pool (no place in the
// limits, offered to no one), and closes once that request ends.
func TestLostPathLeavesWhatCannotMove(t *testing.T) {
	a := fakePath("a", "10.9.0.1")
	m := loManager(t, nil)
	closes := make(chan string, 4)
	entryOf := func(id uint64, name string, busy bool) *entry {
		e := busyEntry(id, a)
		e.c = closeWatched{&fakeConn{busy: busy}, closes, name}
		return e
	}
	idle, replayable, stays := entryOf(1, "idle", false), entryOf(2, "replayable", true), entryOf(3, "stays", true)
	replayable.fate.replayable.Store(true)
	c := poolWith(m, 1, 0, []*Path{a}, idle, replayable, stays)
	defer c.close()
	assert.Equal(t, 1, c.closeDown([]*entry{idle, replayable, stays}), "one stayed")
	assert.ElementsMatch(t, []string{"idle", "replayable"}, []string{<-closes, <-closes})
	c.mu.Lock()
	assert.True(t, replayable.fate.pathDown.Load(), "its request is sent again elsewhere")
	assert.True(t, stays.removed, "out of the pool")
	assert.True(t, c.reg.roomFor("k"), "its place in the host's one is free")
	assert.Empty(t, c.reg.entries["k"], "offered to no one")
	c.mu.Unlock()
	select {
	case name := <-closes:
		t.Fatalf("%s closed while its request goes on", name)
	default:
	}
	stays.c.(closeWatched).busy = false // its request ends
	c.changed(stays)
	assert.Equal(t, "stays", <-closes, "closed once its request ended")
	c.changed(stays)
	select {
	case <-closes:
		t.Fatal("closed twice")
	default:
	}
}
