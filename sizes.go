package intents

import (
	"sync"

	"github.com/sockintents/intents/internal/sizes"
)

// sizeSource says where a request's expected size (Intents.SizeToBeReceived,
// as the policy sees it) came from (DecisionInfo.SizeSource); "": unknown.
type sizeSource string

// The sources of an expected size.
const (
	// sizeFromIntents: the caller's intents said.
	sizeFromIntents sizeSource = "intents"
	// sizeFromURL: the last response to the same URL (Transport).
	sizeFromURL sizeSource = "url"
	// sizeFromOrigin: the median of the origin's recent responses, for a
	// URL not seen before (Transport): a page's objects are often alike.
	sizeFromOrigin sizeSource = "origin"
	// sizeFromRecent: the median of the Transport's recent responses from
	// any origin, for an origin not heard from yet (Transport): a page's
	// objects on its other hosts are often like those already in.
	sizeFromRecent sizeSource = "recent"
	// sizeFromResponse: the Content-Length of the response arriving, less
	// what has arrived (read, or on Linux waiting in the socket: a
	// decision whether to move it; see Mover).
	sizeFromResponse sizeSource = "response"
)

// sizeCache remembers response sizes as hints for later requests: each
// URL's last Content-Length (forgetting the oldest URLs beyond max), and
// each origin's recent sizes, whose median stands for URLs it has not seen,
// and every origin's together, whose median stands for origins it has not
// heard from.
//
// Without the last, a page's requests to its other hosts would go out
// with no size while its root's origin had one, and all go to the nearer
// path, however slow (see docs/findings.md).
type sizeCache struct {
	max     int
	mu      sync.Mutex
	sizes   map[objectKey]int64
	order   []objectKey
	origins *sizes.Keyed // each origin's last originSamples sizes
	recent  sizes.Recent // every origin's
}

// objectKey names an object: its origin (as the pool keys it) and its
// request URI, which a request has without building a string.
type objectKey struct{ origin, uri string }

const (
	// maxSizeEstimate bounds a size taken from a server (a Content-Length,
	// a body's length) for estimates: a server's 2^62 would otherwise make
	// sums of them overflow, and one bogus size swamp a path's backlog.
	// Nothing is allocated from sizes.
	maxSizeEstimate = 1 << 40
	originSamples   = 32
	// maxSizeOrigins bounds the origins remembered; past it the one first
	// heard from goes.
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
func (c *sizeCache) predict(k objectKey) (int64, sizeSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.sizes[k]; ok {
		return n, sizeFromURL
	}
	return c.typicalLocked(k.origin)
}

// originSize is the size to expect from origin for a URL not seen: the
// median of its recent sizes (sizeFromOrigin), else of every origin's
// (sizeFromRecent); "" if nothing is known.
func (c *sizeCache) originSize(origin string) (int64, sizeSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.typicalLocked(origin)
}

// typicalLocked is originSize under c.mu.
func (c *sizeCache) typicalLocked(origin string) (int64, sizeSource) {
	if o, source := c.standsOnLocked(origin); o != nil {
		return o.Median(), source
	}
	return 0, ""
}

// standsOnLocked returns the sizes origin's typical size is taken from
// (its own, else every origin's) and which those are; nil if none are
// known. Under c.mu.
func (c *sizeCache) standsOnLocked(origin string) (*sizes.Recent, sizeSource) {
	if c.origins != nil {
		if o := c.origins.Get(origin); o != nil && o.Len() > 0 {
			return o, sizeFromOrigin
		}
	}
	if c.recent.Len() > 0 {
		return &c.recent, sizeFromRecent
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
	return o != nil && settled(o)
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
	if c.origins == nil {
		c.origins = sizes.NewKeyed(maxSizeOrigins, originSamples)
		c.recent = sizes.MakeRecent(originSamples)
	}
	o := c.origins.Get(k.origin)
	was, wasRecent := o != nil && settled(o), settled(&c.recent)
	o = c.origins.Add(k.origin, size)
	c.recent.Add(size)
	return (!was && settled(o)) || (!wasRecent && settled(&c.recent))
}

// settled reports whether o's median stands on enough sizes for a burst
// of requests: sizesToHoldFor, or two whose newer is the smaller (the
// median, the lower middle, is then the page's own size, not its root's:
// a page of small objects need not wait for a third).
func settled(o *sizes.Recent) bool {
	switch {
	case o.Len() >= sizesToHoldFor:
		return true
	case o.Len() == 2:
		return o.Newest(0) < o.Newest(1)
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
