package intents

import (
	"slices"
	"sync"
)

// SizeSource says where a request's expected size (Intents.SizeToBeReceived,
// as the policy sees it) came from; see DecisionInfo.SizeSource. The empty
// SizeSource: unknown.
type SizeSource string

// The sources of an expected size.
const (
	// SizeFromIntents: the caller's intents said.
	SizeFromIntents SizeSource = "intents"
	// SizeFromURL: the last response to the same URL (Transport).
	SizeFromURL SizeSource = "url"
	// SizeFromOrigin: the median of the origin's recent responses, for a
	// URL not seen before (Transport): a page's objects are often alike.
	SizeFromOrigin SizeSource = "origin"
	// SizeFromRecent: the median of the Transport's recent responses from
	// any origin, for an origin not heard from yet (Transport): a page's
	// objects on its other hosts are often like those already in.
	SizeFromRecent SizeSource = "recent"
	// SizeFromResponse: the Content-Length of the response arriving, less
	// what has arrived (read, or on Linux waiting in the socket: a
	// decision whether to move it; see Mover).
	SizeFromResponse SizeSource = "response"
)

// sizeCache remembers response sizes as hints for later requests: each
// URL's last Content-Length (forgetting the oldest URLs beyond max), and
// each origin's recent sizes, whose median stands for URLs it has not seen,
// and every origin's together, whose median stands for origins it has not
// heard from.
//
// Without the last, a page's requests to its other hosts went out with no
// size at all while the root's origin had one: EAF, told nothing, took the
// lowest RTT, and with the farther path's not yet measured that put all of
// them on the nearer path, however slow (over three hosts, 2 Mbit/s at
// 50 ms beside 20 Mbit/s at 200 ms: 11–13 new connections a load on the
// slow path, the hosts' slots full).
type sizeCache struct {
	max     int
	mu      sync.Mutex
	sizes   map[objectKey]int64
	order   []objectKey
	origins map[string]*originSizes
	recent  originSizes // every origin's responses
}

// objectKey names an object: its origin (as the pool keys it) and its
// request URI, which a request has without building a string.
type objectKey struct{ origin, uri string }

// originSizes are an origin's last originSamples response sizes (or every
// origin's: sizeCache.recent) and their median, kept as they come
// (decisions read it far more often).
//
// The median, not the mean: a page's sizes are skewed (a few large objects
// among many small ones), and a policy moves an object to a farther path
// only when it is large enough to pay for that path's round trips. Told
// the mean (37 kB, once the root, a 100 kB and a 1 kB object were in), EAF
// sent a 1 kB object to a 200 ms path, and such a load took 0.46 s instead of
// 0.26. Taking the lower middle of an even count errs the same way. The
// price: a page's bulk is underestimated until its responses arrive.
type originSizes struct {
	recent [originSamples]int64
	n, i   int
	median int64
}

const (
	// maxSizeEstimate bounds a size taken from a server (a Content-Length,
	// a body's length) for estimates: a server's 2^62 would otherwise make
	// sums of them overflow, and one bogus size swamp a path's backlog.
	// Nothing is allocated from sizes.
	maxSizeEstimate = 1 << 40
	originSamples   = 32
	// maxSizeOrigins bounds the origins remembered; past it the memory
	// starts afresh.
	maxSizeOrigins = 256
)

// get returns the last size of k, 0 if none is known.
func (c *sizeCache) get(k objectKey) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sizes[k]
}

// predict returns the size to expect for k and where it came from: its
// last size, else its origin's recent median, else every origin's; 0 and
// "" if nothing is known.
func (c *sizeCache) predict(k objectKey) (int64, SizeSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.sizes[k]; ok {
		return n, SizeFromURL
	}
	return c.typicalLocked(k.origin)
}

// originSize is the size to expect from origin for a URL not seen: the
// median of its recent sizes (SizeFromOrigin), else of every origin's
// (SizeFromRecent); "" if nothing is known.
func (c *sizeCache) originSize(origin string) (int64, SizeSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.typicalLocked(origin)
}

// typicalLocked is originSize under c.mu.
func (c *sizeCache) typicalLocked(origin string) (int64, SizeSource) {
	if o, source := c.standsOnLocked(origin); o != nil {
		return o.median, source
	}
	return 0, ""
}

// standsOnLocked returns the sizes origin's typical size is taken from
// (its own, else every origin's) and which those are; nil if none are
// known. Under c.mu.
func (c *sizeCache) standsOnLocked(origin string) (*originSizes, SizeSource) {
	if o := c.origins[origin]; o != nil && o.n > 0 {
		return o, SizeFromOrigin
	}
	if c.recent.n > 0 {
		return &c.recent, SizeFromRecent
	}
	return nil, ""
}

// settled reports whether origin's typical size (see originSize) stands
// on enough sizes for a burst of its requests to be placed on it (see
// scheduler.holdsForSizes).
func (c *sizeCache) settled(origin string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, _ := c.standsOnLocked(origin)
	return o != nil && o.settled()
}

// put remembers size for k, and reports whether that settled k's
// origin's median, or every origin's (see settled). The same size of the
// same object again changes nothing: an object fetched over and over does
// not crowd the others out of its origin's median.
func (c *sizeCache) put(k objectKey, size int64) (enough bool) {
	if c.max <= 0 || size < 0 {
		return false
	}
	size = min(size, maxSizeEstimate)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sizes == nil {
		c.sizes = map[objectKey]int64{}
	}
	old, ok := c.sizes[k]
	if ok && old == size {
		return false
	}
	if !ok {
		c.order = append(c.order, k)
		if len(c.order) > c.max {
			delete(c.sizes, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.sizes[k] = size
	o := c.origins[k.origin]
	if o == nil {
		if c.origins == nil || len(c.origins) >= maxSizeOrigins {
			c.origins = map[string]*originSizes{}
		}
		o = &originSizes{}
		c.origins[k.origin] = o
	}
	was, wasRecent := o.settled(), c.recent.settled()
	o.add(size)
	c.recent.add(size)
	return (!was && o.settled()) || (!wasRecent && c.recent.settled())
}

// add takes size as the newest of o's samples.
func (o *originSizes) add(size int64) {
	if o.n < originSamples {
		o.n++
	}
	o.recent[o.i] = size
	o.i = (o.i + 1) % originSamples
	var sorted [originSamples]int64
	copy(sorted[:], o.recent[:o.n])
	slices.Sort(sorted[:o.n])
	o.median = sorted[(o.n-1)/2]
}

// settled reports whether o's median stands on enough sizes for a burst
// of requests: sizesToHoldFor, or two whose newer is the smaller (the
// median, the lower middle, is then the page's own size, not its root's:
// a page of small objects need not wait for a third).
func (o *originSizes) settled() bool {
	switch {
	case o.n >= sizesToHoldFor:
		return true
	case o.n == 2:
		return o.recent[1] < o.recent[0]
	}
	return false
}

// learnSize remembers size for k in sizes; the requests c holds until
// their origin's typical size stands on a few responses (see
// scheduler.holdsForSizes) are decided again once it does.
func learnSize(sizes *sizeCache, c *core, k objectKey, size int64) {
	if sizes.put(k, size) && c.sched.waiting() {
		c.sched.serve()
	}
}
