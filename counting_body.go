package intents

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/sockintents/intents/internal/estimate"
)

// countedBy is rc as this Transport's body of a connection in its pool,
// nil if it is not one (a response from a proxy's or a caller's own
// RoundTripper).
func countedBy(rc io.ReadCloser) *countingBody {
	cb, _ := rc.(*countingBody)
	return cb
}

// newCountingBody counts rc, a response body on e's connection, for t's
// statistics and e's path.
func newCountingBody(rc io.ReadCloser, t *Transport, e *entry) *countingBody {
	return &countingBody{rc: rc, t: t, e: e, pc: t.counters(e.path), start: time.Now()}
}

// countingBody counts a response body's bytes for the path's statistics.
type countingBody struct {
	rc    io.ReadCloser
	t     *Transport
	e     *entry
	pc    *pathCounters // t's on e's path: looked up once, not per Read
	start time.Time
	// sizeOf, when set, is told the body's size once it was read to its
	// end: a response without Content-Length.
	sizeOf func(int64)
	n      atomic.Int64 // Close may race with Read
	expect atomic.Int64 // of the entry's pending bytes, what this body still owes
	done   atomic.Bool
	// The rate sample starts after the first Read: what that returns was
	// mostly buffered with the headers, and a 1 KB body read in
	// microseconds would claim a capacity of gigabits.
	sampleFrom     atomic.Int64 // bytes read by the first Read
	sampleStart    atomic.Int64 // its time, Unix nanoseconds; 0 before it
	pathDelivered0 atomic.Int64 // the path's delivered bytes then
	// pathRx0 is what the path's interface had received then (see
	// tellPath), 0 where its counters cannot be read.
	pathRx0    atomic.Int64
	lastSample atomic.Int64 // Unix nanoseconds of the last interim sample
	sampleSpan atomic.Int64 // minRateSpan of its path, once looked up
	// The body's first flight (see firstFlight): its bytes after the
	// first Read's, the path's meanwhile, when the last of them was read
	// (Unix nanoseconds; 0 before any), and the longest wait between two
	// of its Reads. Only Read touches them (Close and the Mover's rate
	// checks do not), so they need no atomics.
	flight struct {
		bytes, path, at, gap int64
		done                 bool
	}
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	total := b.n.Add(int64(n))
	b.e.bytesIn.Add(int64(n))
	if n > 0 {
		// Counted as they arrive: a progress display reads them.
		b.pc.bytesReceived.Add(int64(n))
		var onPath int64
		if !b.e.mptcp { // its bytes came over several paths
			onPath = b.e.path.delivered(int64(n))
		}
		if b.sampleStart.Load() == 0 {
			b.sampleFrom.Store(total)
			b.pathDelivered0.Store(onPath)
			if owed := b.expect.Load(); !b.e.mptcp && b.e.path != nil && (owed == 0 || owed > int64(n)) {
				if rx, ok := ifaceRxBytes(b.e.path.Name); ok {
					b.pathRx0.Store(rx)
				}
			}
			b.sampleStart.Store(time.Now().UnixNano())
		} else if err == nil && !b.e.mptcp && b.e.path != nil {
			b.firstFlight(total, onPath)
			b.sampleSoFar()
		}
	}
	b.forgo(int64(n))
	if err != nil {
		if err == io.EOF && b.sizeOf != nil && !b.done.Load() {
			b.sizeOf(total)
		}
		b.finish()
	}
	return n, b.e.pathErr(cutShort(err))
}

// forgo takes up to n bytes off what the body still owes its connection
// (and its path's backlog): they arrived, or come another way.
func (b *countingBody) forgo(n int64) {
	for {
		owed := b.expect.Load()
		dec := min(n, owed)
		if dec <= 0 {
			return
		}
		if b.expect.CompareAndSwap(owed, owed-dec) {
			b.e.addPending(-dec)
			return
		}
	}
}

// rate is the rate in bits/s the body has arrived at since its first Read
// (see sampleStart), if that was at least span ago; else 0.
func (b *countingBody) rate(now time.Time, span time.Duration) int64 {
	from := b.sampleStart.Load()
	if from == 0 {
		return 0
	}
	d := now.Sub(time.Unix(0, from))
	if d < span || d <= 0 {
		return 0
	}
	return int64(float64(b.n.Load()-b.sampleFrom.Load()) * 8 / d.Seconds())
}

// firstFlight notes the Reads of the body's first flight, and once the
// body has gone past one initial window, tells the path's estimates when
// that flight was in (see estimate.Path.AddFirstFlight): a page's first
// responses are often a few windows, on a slow path that is the first
// sign of its capacity, and the page's requests are placed on what the
// first ones showed. A body of one window or less tells it whole when it
// ends (finish). total is the body's bytes read so far, onPath the
// path's delivered count.
func (b *countingBody) firstFlight(total, onPath int64) {
	f := &b.flight
	if f.done {
		return
	}
	if total <= firstFlightBody {
		now, prev := time.Now().UnixNano(), f.at
		if prev == 0 {
			prev = b.sampleStart.Load()
		}
		f.bytes = total - b.sampleFrom.Load()
		f.path = onPath - b.pathDelivered0.Load()
		f.at = now
		f.gap = max(f.gap, now-prev)
		return
	}
	if total <= estimate.InitialWindow {
		return
	}
	f.done = true
	if f.at != 0 {
		b.e.path.sampleFirstFlight(f.bytes, f.path, time.Duration(f.at-b.sampleStart.Load()), time.Duration(f.gap))
	}
}

// sampleSoFar tells the path's estimates the body's delivery so far, as
// finish does at its end, once it has been arriving for minRateSpan and
// at most every interimSampleEvery: a page's first responses on a slow
// path take seconds, and until one ends the path's capacity is a guess
// that places the rest of the page (see docs/findings.md).
func (b *countingBody) sampleSoFar() {
	now := time.Now().UnixNano()
	from := b.sampleStart.Load()
	if now-b.lastSample.Load() < int64(interimSampleEvery) || now-from < int64(2*sampleInterval) {
		return // cheap checks first: this runs on every Read
	}
	// The span once per body: the path's estimate takes a lock and may
	// allocate, and a long round trip's span is many Reads away.
	span := b.sampleSpan.Load()
	if span == 0 {
		span = int64(minRateSpan(b.e.path))
		b.sampleSpan.Store(span)
	}
	if now-from < span {
		return
	}
	b.lastSample.Store(now)
	b.tellPath(b.n.Load(), time.Duration(now-from))
}

// tellPath gives the path's estimates the body's n bytes so far, over d
// since its first Read, and what the path delivered meanwhile. An MPTCP
// connection's bytes came over several paths: its own rate is all it
// tells, and it is charged to its first path (a policy that uses MPTCP
// learns nothing else about it).
//
// What this library read is not what arrived meanwhile: bytes that came
// before the first Read, on this connection or the path's others, and are
// read within d make the path look faster than it is (see
// docs/findings.md). Where the interface's
// counters can be read, what it received over d bounds both (its headers
// make it a few percent more than the payload).
func (b *countingBody) tellPath(n int64, d time.Duration) {
	own, pathBytes := n-b.sampleFrom.Load(), int64(0)
	if !b.e.mptcp {
		pathBytes = b.e.path.delivered(0) - b.pathDelivered0.Load()
		if rx0 := b.pathRx0.Load(); rx0 > 0 {
			if rx, ok := ifaceRxBytes(b.e.path.Name); ok && rx >= rx0 {
				own, pathBytes = min(own, rx-rx0), min(pathBytes, rx-rx0)
			}
		}
	}
	b.e.path.sampleTransfer(own, pathBytes, d)
}

func (b *countingBody) Close() error {
	err := b.rc.Close()
	b.finish()
	return err
}

func (b *countingBody) finish() {
	if b.done.Swap(true) {
		return
	}
	b.e.addPending(-b.expect.Swap(0))
	now := time.Now()
	if s := &b.t.core.sched; s.tracksLoops() {
		s.loops.ended(b.e.key, now)
	}
	d := now.Sub(b.start)
	n := b.n.Load()
	if from := b.sampleStart.Load(); from != 0 {
		b.tellPath(n, now.Sub(time.Unix(0, from)))
	}
	b.pc.receiveNanos.Add(int64(d))
}

// path is the path the body comes over (nil: the OS's routing, or no
// body of the pool's).
func (b *countingBody) path() *Path {
	if b == nil {
		return nil
	}
	return b.e.path
}
