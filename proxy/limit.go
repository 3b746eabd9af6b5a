package proxy

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Limits of a listener's admission, beside Server.MaxClients.
const (
	// maxGuests bounds the clients outside Allow served at once to be told
	// so; more are closed at once. They hold no client's place.
	maxGuests = 64
	// maxParked bounds the clients waiting for a place; beyond it the
	// listener stops accepting, and more wait in the kernel's queue.
	maxParked = 1024
	// requestGrace is how long a new connection may go without a request
	// (a TLS handshake, a SOCKS5 greeting) before, at the limit, it may be
	// closed to make room for another client.
	requestGrace = time.Second
)

// connState is where a client connection is in its life, for choosing
// which to close when a new client needs its place.
type connState int

const (
	stateNew    connState = iota // no request yet
	stateActive                  // serving a request
	stateIdle                    // between requests
)

// limitListener admits at most max clients at once, and makes room for a
// new client rather than have it wait: at the limit it closes the client
// idle longest between requests, or else one that has gone requestGrace
// without a request. A client that allowed rejects takes no place: up to
// maxGuests of them are served at once (to be told they are not allowed),
// the rest closed. Its connections give their socket (NetConn): a tunnel
// relays between two *net.TCPConn, splicing between the sockets
// themselves (see relayCopy).
//
// Connections are accepted as they come, so that one waiting for a place
// does not stall the queue behind it; those that find no place and no
// connection to close wait, oldest first.
type limitListener struct {
	net.Listener
	max     int
	allowed func(remote string) bool
	grace   time.Duration
	parkMax int // clients waiting for a place at most (maxParked)

	mu     sync.Mutex
	held   map[*limitConn]struct{} // the clients holding a place
	byAddr map[netip.Addr]int      // places held, by client address
	parked []net.Conn              // clients waiting for a place, oldest first
	ready  []net.Conn              // admitted, for Accept to return
	err    error                   // the listener's last error, for Accept to return (net.ErrClosed stays)
	guests int
	timer  *time.Timer // admits parked clients once a held connection's grace ends
	closed bool

	wake   chan struct{} // Accept has something to return
	unpark chan struct{} // a waiting client took a place
	done   chan struct{}
	start  sync.Once
	wg     sync.WaitGroup
}

func newLimitListener(l net.Listener, max int, allowed func(remote string) bool) *limitListener {
	ll := &limitListener{Listener: l, max: max, allowed: allowed, grace: requestGrace, parkMax: maxParked,
		held: map[*limitConn]struct{}{}, byAddr: map[netip.Addr]int{},
		wake: make(chan struct{}, 1), unpark: make(chan struct{}, 1), done: make(chan struct{})}
	return ll
}

// Accept returns the next client admitted; the first call starts
// accepting.
func (l *limitListener) Accept() (net.Conn, error) {
	l.start.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if !l.closed {
			l.wg.Go(l.acceptLoop)
		}
	})
	for {
		l.mu.Lock()
		if len(l.ready) > 0 {
			c := l.ready[0]
			l.ready = l.ready[1:]
			l.mu.Unlock()
			return c, nil
		}
		if err := l.err; err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.err = nil
			}
			l.mu.Unlock()
			return nil, err
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
}

// acceptLoop accepts connections and admits, parks or refuses each.
func (l *limitListener) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.signal()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: as net/http's Serve does, wait a
			// little longer each time before accepting again.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		if l.admit(c) {
			select { // accept again once a waiting client has a place
			case <-l.unpark:
			case <-l.done:
				return
			}
		}
	}
}

// admit gives c a place, the place of a connection it closes, or a place
// in the queue; or, for a client that is not allowed, a guest's pass. It
// reports whether the queue is full.
func (l *limitListener) admit(c net.Conn) (full bool) {
	guest := l.allowed != nil && !l.allowed(c.RemoteAddr().String())
	l.mu.Lock()
	switch {
	case l.closed, guest && l.guests >= min(maxGuests, l.max):
		l.mu.Unlock()
		c.Close()
		return false
	case guest:
		l.guests++
		l.ready = append(l.ready, &limitConn{Conn: c, l: l, guest: true})
		l.mu.Unlock()
		l.signal()
		return false
	}
	l.parked = append(l.parked, c)
	victims := l.admitParkedLocked(time.Now())
	shed := l.shedParkedLocked()
	full = len(l.parked) >= l.parkMax
	l.mu.Unlock()
	closeAll(victims)
	for _, c := range shed {
		c.Close()
	}
	l.signal()
	return full
}

// holdLocked gives c a place and queues it for Accept.
func (l *limitListener) holdLocked(c net.Conn) {
	lc := &limitConn{Conn: c, l: l, since: time.Now(), addr: shareOf(c.RemoteAddr().String())}
	l.held[lc] = struct{}{}
	l.byAddr[lc.addr]++
	l.ready = append(l.ready, lc)
}

// dropLocked takes c's place away; c must hold one.
func (l *limitListener) dropLocked(c *limitConn) {
	delete(l.held, c)
	if l.byAddr[c.addr]--; l.byAddr[c.addr] <= 0 {
		delete(l.byAddr, c.addr)
	}
	c.released = true
}

// nextParkedLocked is the waiting client to admit next: the first of
// those whose address holds the fewest places, so that a client is not
// kept waiting behind another address's flood of connections; -1 if
// every waiting client's address holds its share already (see
// mayHoldLocked).
func (l *limitListener) nextParkedLocked() int {
	next, fewest := -1, -1
	for i, c := range l.parked {
		remote := c.RemoteAddr().String()
		n := l.byAddr[shareOf(remote)]
		if (fewest < 0 || n < fewest) && l.mayHoldLocked(remote) {
			next, fewest = i, n
			if n == 0 {
				break
			}
		}
	}
	return next
}

// mayHoldLocked reports whether a client at remote may take another
// place: a quarter of them per address, so that one address's requests
// hanging at an origin that never answers leave the other clients their
// places; the programs on the proxy's own host (see ownedByHost) hold
// every place.
func (l *limitListener) mayHoldLocked(remote string) bool {
	return l.byAddr[shareOf(remote)] < max(1, l.max/4) || ownedByHost(remote)
}

// shedParkedLocked closes waiting clients whose address holds its share
// already, oldest first, while the queue is full: else they would stop
// the accepting of every other client.
func (l *limitListener) shedParkedLocked() (shed []net.Conn) {
	for i := 0; i < len(l.parked) && len(l.parked) >= l.parkMax; {
		if c := l.parked[i]; !l.mayHoldLocked(c.RemoteAddr().String()) {
			shed = append(shed, c)
			l.parked = slices.Delete(l.parked, i, i+1)
			continue
		}
		i++
	}
	return shed
}

// victimLocked is the connection to close for a new client; nil if none
// may be closed now. First the oldest that has had no request for the
// grace and has nothing waiting in its socket (silent: a handshake never
// started, a flood of connections that send nothing), then the one idle
// longest between requests (a keep-alive client, which comes back), but
// only once no new connection is still in its grace: while one is, it
// may turn out silent, and a flood of them would else close the
// keep-alive clients one by one. A connection the server has not read
// from yet, on a busy machine, may hold a request unread: closing it
// would fail a client only slow to be served. Where the socket cannot be
// asked, a silent connection may be such a one, so the idle go first.
func (l *limitListener) victimLocked(now time.Time) *limitConn {
	var idle *limitConn
	var fresh []*limitConn
	young := false
	for c := range l.held {
		switch {
		case c.state == stateIdle && (idle == nil || c.since.Before(idle.since)):
			idle = c
		case c.state == stateNew && now.Sub(c.since) >= l.grace:
			fresh = append(fresh, c)
		case c.state == stateNew:
			young = true
		}
	}
	if !canTellWaiting {
		if idle != nil {
			return idle
		}
		young = false
	}
	slices.SortFunc(fresh, func(a, b *limitConn) int { return a.since.Compare(b.since) })
	for _, c := range fresh {
		// A non-blocking ioctl, not a read: cheap enough under the lock.
		if !bytesWaiting(c.Conn) {
			return c
		}
	}
	if young {
		return nil // armLocked looks again when its grace ends
	}
	return idle
}

// armLocked has parked clients looked at again when the first held
// connection without a request reaches its grace, or, if every such one
// has (their requests wait unread in their sockets), a grace from now.
func (l *limitListener) armLocked(now time.Time) {
	wait := time.Duration(0)
	for c := range l.held {
		if c.state != stateNew {
			continue
		}
		w := c.since.Add(l.grace).Sub(now)
		if w <= 0 {
			w = l.grace
		}
		if wait == 0 || w < wait {
			wait = w
		}
	}
	if wait == 0 {
		return // a place comes free only when a client closes or goes idle
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(wait, l.admitParked)
	} else {
		l.timer.Reset(wait)
	}
}

// admitParked gives waiting clients the places that are free or may be
// made free.
func (l *limitListener) admitParked() {
	l.mu.Lock()
	victims := l.admitParkedLocked(time.Now())
	l.mu.Unlock()
	closeAll(victims)
	l.signal()
}

// admitParkedLocked gives waiting clients (see nextParkedLocked) the
// places that are free or may be made free, and returns the connections
// to close for them.
func (l *limitListener) admitParkedLocked(now time.Time) (victims []*limitConn) {
	for len(l.parked) > 0 && !l.closed {
		i := l.nextParkedLocked()
		if i < 0 {
			break // each waits for a place of its address's share
		}
		if len(l.held) >= l.max {
			v := l.victimLocked(now)
			if v == nil {
				l.armLocked(now)
				break
			}
			l.dropLocked(v)
			victims = append(victims, v)
		}
		if len(l.parked) == l.parkMax { // acceptLoop waits for room
			select {
			case l.unpark <- struct{}{}:
			default:
			}
		}
		c := l.parked[i]
		l.parked = slices.Delete(l.parked, i, i+1)
		l.holdLocked(c)
	}
	return victims
}

// closeAll closes connections that lost their place: the server sees
// their reads fail and closes them.
func closeAll(victims []*limitConn) {
	for _, v := range victims {
		v.Conn.Close()
	}
}

func (l *limitListener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// release gives c's place back: c closed, or became a tunnel, which
// MaxTunnels counts instead.
func (l *limitListener) release(c *limitConn) {
	l.mu.Lock()
	if c.released {
		l.mu.Unlock()
		return
	}
	if c.guest {
		c.released = true
		l.guests--
		l.mu.Unlock()
		return
	}
	l.dropLocked(c)
	l.mu.Unlock()
	l.admitParked()
}

// setState notes where c, a connection this listener returned (or one
// wrapping it, as a *tls.Conn does), is in its life.
func (l *limitListener) setState(c net.Conn, st connState) {
	lc := unwrapLimitConn(c)
	if lc == nil {
		return
	}
	l.mu.Lock()
	lc.state, lc.since = st, time.Now()
	l.mu.Unlock()
	if st == stateIdle {
		l.admitParked() // an idle client may now make room
	}
}

// connState is an http.Server's ConnState hook: it follows each client
// and gives a hijacked one's place back (a CONNECT tunnel now).
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateActive:
		l.setState(c, stateActive)
	case http.StateIdle:
		l.setState(c, stateIdle)
	case http.StateHijacked:
		releasePlace(c)
	}
}

// Close closes the listener and the clients still waiting for a place.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.done)
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	waiting := append(l.parked, l.ready...)
	l.parked, l.ready = nil, nil
	l.mu.Unlock()
	for _, c := range waiting {
		c.Close()
	}
	l.wg.Wait()
	return err
}

// releasePlace gives back the place of c, a connection a limitListener
// returned (or one wrapping it), that now carries a tunnel.
func releasePlace(c net.Conn) {
	if lc := unwrapLimitConn(c); lc != nil {
		lc.l.release(lc)
	}
}

func unwrapLimitConn(c net.Conn) *limitConn {
	lc, _ := under[*limitConn](c)
	return lc
}

// under is the first connection of type T in c's wrappers (each giving
// the one below by NetConn, as *tls.Conn does), c itself included.
func under[T net.Conn](c net.Conn) (T, bool) {
	for c != nil {
		if t, ok := c.(T); ok {
			return t, true
		}
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = nc.NetConn()
	}
	var zero T
	return zero, false
}

// limitConn holds its listener's place until it is closed or released.
// Its fields but Conn are guarded by the listener's mu.
type limitConn struct {
	net.Conn
	l        *limitListener
	addr     netip.Addr
	guest    bool
	state    connState
	since    time.Time // of the state
	released bool
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}

// NetConn is the connection's socket.
func (c *limitConn) NetConn() net.Conn { return c.Conn }
