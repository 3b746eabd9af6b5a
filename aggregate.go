package intents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Aggregate configures downloads of one object over all permitted paths at
// once, in byte ranges, without help from the server beyond Range support:
// multipath for servers (or middleboxes) without MPTCP. See
// Transport.Aggregate.
type Aggregate struct {
	// MinSize: objects smaller than this are fetched plainly (default
	// 1 MB). The first range request is MinChunk bytes; its Content-Range
	// tells the size when no size hint did.
	MinSize int64
	// MinChunk is the smallest range requested (default 256 KiB). A path
	// gets ranges of about half a second of its rate, between MinChunk and
	// 16 × MinChunk.
	MinChunk int64
	// MaxParallel bounds the ranges in flight over all paths (default 2 per
	// permitted path: the next range is asked for before the last one is
	// in, so no path idles a round trip).
	MaxParallel int
	// Window bounds memory: no range starts more than Window bytes beyond
	// what the caller has read (default 16 MiB).
	Window int64
}

func (a Aggregate) withDefaults(paths int) Aggregate {
	if a.MinSize <= 0 {
		a.MinSize = 1e6
	}
	if a.MinChunk <= 0 {
		a.MinChunk = 256 << 10
	}
	if a.MaxParallel <= 0 {
		a.MaxParallel = 2 * paths
	}
	if a.Window <= 0 {
		a.Window = 16 << 20
	}
	a.Window = max(a.Window, 2*a.MinChunk)
	return a
}

// closeFunc is a body that calls stop once it is closed.
type closeFunc struct {
	io.ReadCloser
	stop context.CancelFunc
}

func (c *closeFunc) Close() error {
	err := c.ReadCloser.Close()
	c.stop()
	return err
}

// aggBody is the response body of an aggregated download: ranges fetched
// concurrently over the paths, read in order. Chunks are kept from the
// read position up to Window beyond it.
type aggBody struct {
	t     *Transport
	req   *http.Request
	cfg   Aggregate
	v     validator
	total int64
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when something happened
	chunks  []*chunk      // from the one holding pos on, by start
	next    int64         // first byte not in any chunk yet
	pos     int64         // read position
	paths   []*aggPath
	err     error // ends the download (after what was read)
	closed  bool
	retry   *time.Timer // schedules again when the next failed range may be retried
	// buffered is the size of the chunks held; peak its most.
	buffered, peak int64
}

// aggPath is one path's part in a download.
type aggPath struct {
	p        *Path
	inFlight int
	bytes    int64         // received over it in this download
	since    time.Time     // when inFlight last went from 0 to 1
	active   time.Duration // time with fetches in flight before that
	dead     error         // why it is no longer used for this download
	failures int           // fetches failed in a row on it
	rtt      time.Duration
	prior    float64 // bytes per second, from the path's estimate
}

func (a *aggPath) begin(now time.Time) {
	if a.inFlight == 0 {
		a.since = now
	}
	a.inFlight++
}

func (a *aggPath) end(now time.Time) {
	a.inFlight--
	if a.inFlight == 0 {
		a.active += now.Sub(a.since)
	}
}

// rate is the path's delivery rate in this download, once it has carried
// enough to tell (the estimate until then).
func (a *aggPath) rate(now time.Time) float64 {
	active := a.active
	if a.inFlight > 0 {
		active += now.Sub(a.since)
	}
	if a.bytes < 128<<10 || active <= 0 {
		return a.prior
	}
	return float64(a.bytes) / active.Seconds()
}

// chunk is one range of the object. Its bytes arrive from a primary fetch
// (from start on) and, at the tail, perhaps a duplicate fetch on another
// path (from dupFrom on); both write the same bytes of the one version
// into buf, and whichever covers the range first wins.
type chunk struct {
	start, end int64 // [start, end)
	buf        []byte
	got        int64 // contiguous bytes from start
	fetching   bool  // a primary fetch is under way
	owner      *aggPath
	dupFrom    int64
	dupGot     int64
	dup        *aggPath
	cancels    []context.CancelFunc
	failures   int       // fetches of it that failed
	retryAt    time.Time // not asked for again before then
}

// covered is how many bytes from start are in.
func (c *chunk) covered() int64 {
	n := c.got
	if c.dup != nil && c.dupFrom-c.start <= n {
		n = max(n, c.dupFrom-c.start+c.dupGot)
	}
	return n
}

func (c *chunk) size() int64 { return c.end - c.start }
func (c *chunk) done() bool  { return c.covered() >= c.size() }

// newAggBody starts the download of the object whose first part is
// arriving on first, in the context that stop ends.
func newAggBody(ctx context.Context, stop context.CancelFunc, t *Transport, req *http.Request, paths []*Path,
	cfg Aggregate, v validator, got part, first io.ReadCloser) *aggBody {
	b := &aggBody{t: t, req: req, cfg: cfg, v: v, total: got.total, ctx: ctx, stop: stop,
		changed: make(chan struct{})}
	for _, p := range paths {
		e := p.Estimate()
		ap := &aggPath{p: p, rtt: e.RTT, prior: float64(e.Bandwidth) / 8}
		if ap.rtt <= 0 {
			ap.rtt = 100 * time.Millisecond
		}
		if ap.prior <= 0 {
			ap.prior = 125_000 // 1 Mbit/s until measured
		}
		b.paths = append(b.paths, ap)
	}
	if len(b.paths) == 0 {
		// A loopback destination, or no path known: ranges in parallel on
		// whatever the policy (or the OS) picks.
		b.paths = []*aggPath{{rtt: time.Millisecond, prior: 125e6}}
	}
	// The first range is the first chunk, arriving on the response already
	// made (on whichever path the policy chose for it). check bounded its
	// size by MinChunk: a server's number allocates nothing.
	firstEnd := got.last + 1
	c := &chunk{start: 0, end: firstEnd, buf: make([]byte, firstEnd), fetching: true}
	b.chunks = []*chunk{c}
	b.buffered, b.peak = firstEnd, firstEnd
	b.next = firstEnd
	b.wg.Add(1)
	go b.receive(c, nil, got.body(first), 0, false, func() {})
	b.mu.Lock()
	b.schedule()
	b.mu.Unlock()
	return b
}

// broadcast wakes the reader, under b.mu.
func (b *aggBody) broadcast() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// predict is when path a would have n more bytes in, from now, given what
// it already has in flight: Earliest Arrival First on this download's own
// measurements.
func (b *aggBody) predict(a *aggPath, n int64) time.Duration {
	var owed int64
	for _, c := range b.chunks {
		if c.owner == a {
			owed += c.size() - c.got
		}
		if c.dup == a {
			owed += c.end - c.dupFrom - c.dupGot
		}
	}
	return a.rtt + time.Duration(float64(owed+n)/a.rate(time.Now())*float64(time.Second))
}

func (b *aggBody) chunkFor(a *aggPath) int64 {
	n := int64(a.rate(time.Now()) / 2)
	return min(max(n, b.cfg.MinChunk), 16*b.cfg.MinChunk)
}

// schedule starts what may start, under b.mu: chunks given back by a
// failed path first, then new chunks within the window, each to the path
// predicted to finish it first; at the tail, a duplicate of the chunk
// predicted to finish last on a path that would finish it sooner.
func (b *aggBody) schedule() {
	if b.err != nil || b.closed {
		return
	}
	sl := aggSlots{perPath: max(1, b.cfg.MaxParallel/max(len(b.paths), 1)), max: b.cfg.MaxParallel}
	for _, a := range b.paths {
		sl.inFlight += a.inFlight
	}
	for {
		orphans := b.startOrphans(&sl)
		if !b.startNext(&sl) && !orphans {
			break
		}
	}
	if b.next < b.total {
		return
	}
	b.duplicateTail(&sl)
}

// aggSlots are the fetches an aggregated body may have at once: per path
// and in all.
type aggSlots struct{ inFlight, perPath, max int }

// free reports whether a may start a fetch.
func (sl *aggSlots) free(a *aggPath) bool {
	return a.dead == nil && a.inFlight < sl.perPath && sl.inFlight < sl.max
}

// soonest is the live path predicted to have n more bytes in first,
// what it has in flight included.
func (b *aggBody) soonest(n int64) *aggPath {
	var pick *aggPath
	var at time.Duration
	for _, a := range b.paths {
		if a.dead != nil {
			continue
		}
		if t := b.predict(a, n); pick == nil || t < at {
			pick, at = a, t
		}
	}
	return pick
}

// startOrphans starts the chunks whose fetch failed, once their backoff
// is over, each on the path that would have it soonest; it reports
// whether it started any.
func (b *aggBody) startOrphans(sl *aggSlots) bool {
	started := false
	now := time.Now()
	for _, c := range b.chunks {
		if c.fetching || c.done() || now.Before(c.retryAt) {
			continue
		}
		// The reader waits for this one: it goes now, beside what the
		// path has in flight, not after it.
		blocking := c.start <= b.pos && b.pos < c.end
		if a := b.soonest(c.size() - c.got); a != nil && (sl.free(a) || blocking) {
			b.start(c, a, c.start+c.got, false)
			sl.inFlight++
			started = true
		}
	}
	return started
}

// startNext starts, within the window, the next chunk on the first free
// path that would have it soonest; it reports whether it started one.
func (b *aggBody) startNext(sl *aggSlots) bool {
	if b.next >= b.total || b.next >= b.pos+b.cfg.Window {
		return false
	}
	for _, a := range b.paths {
		if !sl.free(a) {
			continue
		}
		n := min(b.chunkFor(a), b.total-b.next)
		if b.soonest(n) != a {
			continue // another path would have it sooner, even after what it has
		}
		c := &chunk{start: b.next, end: b.next + n, buf: make([]byte, n)}
		b.chunks = append(b.chunks, c)
		b.buffered += n
		b.peak = max(b.peak, b.buffered)
		b.next += n
		b.start(c, a, c.start, false)
		sl.inFlight++
		return true
	}
	return false
}

// duplicateTail has each idle path ask again for the rest of the chunk
// predicted to finish last, if it would finish that sooner.
func (b *aggBody) duplicateTail(sl *aggSlots) {
	for _, a := range b.paths {
		if a.inFlight > 0 || !sl.free(a) {
			continue
		}
		var worst *chunk
		var worstAt time.Duration
		for _, c := range b.chunks {
			if c.done() || c.dup != nil || !c.fetching || c.owner == nil || c.owner == a {
				continue
			}
			if at := b.predict(c.owner, 0); worst == nil || at > worstAt {
				worst, worstAt = c, at
			}
		}
		if worst == nil {
			continue
		}
		from := worst.start + worst.got
		if left := worst.end - from; left > 0 && b.predict(a, left) < worstAt*4/5 {
			b.start(worst, a, from, true)
			sl.inFlight++
		}
	}
}

// start fetches [from, c.end) of c on a, under b.mu.
func (b *aggBody) start(c *chunk, a *aggPath, from int64, dup bool) {
	ctx, cancel := context.WithCancel(b.ctx)
	c.cancels = append(c.cancels, cancel)
	if dup {
		c.dup, c.dupFrom, c.dupGot = a, from, 0
	} else {
		c.owner, c.fetching = a, true
	}
	a.begin(time.Now())
	b.wg.Add(1)
	go func() {
		body, err := b.request(ctx, a, from, c.end)
		if err != nil {
			b.fail(c, a, dup, err)
			cancel()
			b.wg.Done()
			return
		}
		b.receive(c, a, body, from, dup, cancel)
	}()
}

// request asks for [from, end) over a's path only, with If-Range.
func (b *aggBody) request(ctx context.Context, a *aggPath, from, end int64) (io.ReadCloser, error) {
	in, _ := FromContext(b.req.Context())
	in.SizeToBeReceived = end - from
	in.Multipath = MultipathOff
	if a.p != nil {
		in.Interfaces = map[string]Level{a.p.Name: LevelRequire}
	}
	ask := byteRange{first: from, last: end - 1, total: b.total, v: b.v}
	body, _, err := ask.fetch(callerResumes(WithIntents(ctx, in)), b.t, b.req, nil)
	return body, err
}

// receive copies body into c from offset from until c is covered, the
// body ends or fails, or the fetch is cancelled.
func (b *aggBody) receive(c *chunk, a *aggPath, body io.ReadCloser, from int64, dup bool, cancel context.CancelFunc) {
	defer b.wg.Done()
	defer cancel()
	defer body.Close()
	scratch := make([]byte, 32<<10)
	pos := from
	for pos < c.end {
		n, err := body.Read(scratch[:min(int64(len(scratch)), c.end-pos)])
		b.mu.Lock()
		if n > 0 {
			copy(c.buf[pos-c.start:], scratch[:n])
			pos += int64(n)
			if dup {
				c.dupGot = pos - c.dupFrom
			} else {
				c.got = pos - c.start
			}
			if a != nil {
				a.bytes += int64(n)
				a.failures = 0
			}
			b.broadcast()
		}
		covered := c.done()
		b.mu.Unlock()
		if covered {
			break
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the range was shorter than promised
			}
			b.fail(c, a, dup, err)
			return
		}
	}
	b.mu.Lock()
	if a != nil {
		a.end(time.Now())
	}
	if c.done() {
		for _, cf := range c.cancels {
			cf() // the other fetch of this chunk, if any
		}
	}
	b.schedule()
	b.broadcast()
	b.mu.Unlock()
}

// Retrying failed ranges: a range is asked for at most maxRangeAttempts
// times, after a backoff doubling from rangeRetryBackoff; a path is out
// of the download when it went down (or cannot be asked), or after maxPathFailures failures in
// a row (a fetch that delivers bytes ends a row). A range GET is
// idempotent and the If-Range validator keeps every answer to one version,
// so sending it again is safe (net/http retries idempotent requests too,
// Transport.roundTrip / persistConn.shouldRetryRequest); the bound keeps a
// broken server from being asked for ever.
const (
	maxRangeAttempts  = 5
	maxPathFailures   = 3
	rangeRetryBackoff = 25 * time.Millisecond
)

// fail handles a fetch that failed: unless the download was closed or the
// chunk is covered anyway, the chunk is asked for again, after a backoff,
// on whichever path (the same one too) is predicted to finish it first.
// The object changing, a range failing maxRangeAttempts times, or every
// path being out ends the download.
func (b *aggBody) fail(c *chunk, a *aggPath, dup bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if a != nil {
		a.end(now)
	}
	if dup {
		c.dup = nil
	} else {
		c.owner, c.fetching = nil, false
	}
	switch {
	case b.closed || c.done() || b.err != nil: // ending anyway, or nothing lost
	case errors.Is(err, ErrObjectChanged):
		b.err = err
	case b.ctx.Err() != nil:
		b.err = b.ctx.Err()
	case dup: // the primary fetch goes on
	default:
		if a != nil {
			// A path that went down, or that its own range request could not
			// even be placed on (no permitted path: it is down or gone), is
			// out at once; other failures count, in a row.
			if a.failures++; a.failures >= maxPathFailures || errors.Is(err, ErrPathDown) || errors.Is(err, ErrNoPath) {
				a.dead = err
			}
		}
		alive := false
		for _, p := range b.paths {
			alive = alive || p.dead == nil
		}
		c.failures++
		switch {
		case !alive:
			b.err = fmt.Errorf("intents: aggregated download: every path failed, last %s: %w", pathName(a.p), err)
		case c.failures >= maxRangeAttempts:
			b.err = fmt.Errorf("intents: aggregated download: bytes %d-%d failed %d times, last: %w", c.start, c.end-1, c.failures, err)
		case a != nil && a.dead != nil:
			// Its path is out: the other paths take it at once.
		default:
			c.retryAt = now.Add(min(rangeRetryBackoff<<(c.failures-1), time.Second))
			b.armRetry(now)
		}
	}
	if b.err != nil {
		b.stop()
	}
	b.schedule()
	b.broadcast()
}

// armRetry sets the retry timer for the earliest backoff still running,
// under b.mu: one timer per download.
func (b *aggBody) armRetry(now time.Time) {
	var next time.Time
	for _, c := range b.chunks {
		if !c.fetching && !c.done() && c.retryAt.After(now) && (next.IsZero() || c.retryAt.Before(next)) {
			next = c.retryAt
		}
	}
	switch {
	case next.IsZero():
	case b.retry == nil:
		b.retry = time.AfterFunc(next.Sub(now), b.retryDue)
	default:
		b.retry.Reset(next.Sub(now))
	}
}

// retryDue schedules the ranges whose backoff is over.
func (b *aggBody) retryDue() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.schedule()
	b.armRetry(time.Now())
}

// Read reads the object in order, waiting for its next bytes.
func (b *aggBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.closed {
			return 0, errors.New("intents: read on a closed body")
		}
		if b.pos >= b.total {
			return 0, io.EOF
		}
		if len(b.chunks) == 0 { // nothing could start: every path failed
			if b.err != nil {
				return 0, b.err
			}
			return 0, errors.New("intents: aggregated download: no path to fetch from")
		}
		c := b.chunks[0]
		if avail := c.covered() - (b.pos - c.start); avail > 0 {
			off := b.pos - c.start
			n := copy(p, c.buf[off:off+avail])
			b.pos += int64(n)
			if b.pos == c.end {
				b.buffered -= c.size()
				b.chunks[0] = nil
				b.chunks = b.chunks[1:]
				b.schedule() // the window moved
			}
			return n, nil
		}
		if b.err != nil {
			return 0, b.err
		}
		wait := b.changed
		b.mu.Unlock()
		<-wait
		b.mu.Lock()
	}
}

// Close stops the fetches, wakes a Read waiting for bytes and waits for
// the fetches to end: they read bodies in the download's own context, which
// it cancels, so it returns promptly, as net/http's Close does.
func (b *aggBody) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.retry != nil {
		b.retry.Stop()
	}
	b.broadcast()
	b.mu.Unlock()
	b.stop()
	b.wg.Wait()
	return nil
}
