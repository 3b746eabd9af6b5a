package intents

import (
	"crypto/sha256"
	"sync"
	"time"

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
//
// Origins and URLs are held as keyed hashes (see sizeID), which is how a
// Knowledge file keeps them: what a Transport learnt is saved and restored
// whole (see savedSizes), and the file holds no browsing history in clear.
type sizeCache struct {
	max int
	key [32]byte // keys the hashes; a Knowledge file's own, else random

	mu      sync.Mutex
	sizes   map[sizeID]int64 // by object (see objectID)
	order   []sizeID         // the objects, first stored first
	origins *sizes.Keyed[sizeID]
	recent  sizes.Recent // every origin's
	at      time.Time    // when a size was last stored (zero: never)
}

// newSizeCache returns a sizeCache of at most max URLs whose hashes key
// uses.
func newSizeCache(max int, key [32]byte) *sizeCache {
	return &sizeCache{max: max, key: key}
}

// sizeID names an origin or an object in a sizeCache: the first half of
// SHA-256 over the cache's key and the name, which no one without the
// key can tell the name from, nor a file's IDs from another's.
type sizeID [16]byte

// objectKey names an object: its origin (as the pool keys it) and its
// request URI, which a request has without building a string.
type objectKey struct{ origin, uri string }

// id hashes name, of kind ('o' an origin, 'u' an object), under c's key.
func (c *sizeCache) id(kind byte, name ...string) sizeID { return keyedID(c.key, kind, name...) }

// keyedID hashes name, of kind (a letter), under key (see sizeID).
func keyedID(key [32]byte, kind byte, name ...string) sizeID {
	var buf [256]byte
	b := append(buf[:0], key[:]...)
	b = append(b, kind)
	for i, n := range name {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, n...)
	}
	sum := sha256.Sum256(b)
	return sizeID(sum[:16])
}

func (c *sizeCache) originID(origin string) sizeID { return c.id('o', origin) }
func (c *sizeCache) objectID(k objectKey) sizeID   { return c.id('u', k.origin, k.uri) }

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
	id := c.objectID(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sizes[id]
}

// predict returns the size to expect for k and where it came from: its
// last size, else its origin's recent median, else every origin's; 0 and
// "" if nothing is known.
func (c *sizeCache) predict(k objectKey) (int64, sizeSource) {
	id, origin := c.objectID(k), c.originID(k.origin)
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.sizes[id]; ok {
		return n, sizeFromURL
	}
	return c.typicalLocked(origin)
}

// originSize is the size to expect from origin for a URL not seen: the
// median of its recent sizes (sizeFromOrigin), else of every origin's
// (sizeFromRecent); "" if nothing is known.
func (c *sizeCache) originSize(origin string) (int64, sizeSource) {
	id := c.originID(origin)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.typicalLocked(id)
}

// typicalLocked is originSize under c.mu.
func (c *sizeCache) typicalLocked(origin sizeID) (int64, sizeSource) {
	if o, source := c.standsOnLocked(origin); o != nil {
		return o.Median(), source
	}
	return 0, ""
}

// standsOnLocked returns the sizes origin's typical size is taken from
// (its own, else every origin's) and which those are; nil if none are
// known. Under c.mu.
func (c *sizeCache) standsOnLocked(origin sizeID) (*sizes.Recent, sizeSource) {
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
	id := c.originID(origin)
	c.mu.Lock()
	defer c.mu.Unlock()
	o, _ := c.standsOnLocked(id)
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
	id, origin := c.objectID(k), c.originID(k.origin)
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.sizes[id]
	if ok && old == size {
		return false
	}
	c.storeLocked(id, size)
	c.initLocked()
	o := c.origins.Get(origin)
	was, wasRecent := o != nil && settled(o), settled(&c.recent)
	o = c.origins.Add(origin, size)
	c.recent.Add(size)
	c.at = time.Now()
	return (!was && settled(o)) || (!wasRecent && settled(&c.recent))
}

// storeLocked sets the size of the object id, forgetting the first
// stored beyond c.max. Under c.mu.
func (c *sizeCache) storeLocked(id sizeID, size int64) {
	if c.sizes == nil {
		c.sizes = map[sizeID]int64{}
	}
	if _, ok := c.sizes[id]; !ok {
		c.order = append(c.order, id)
		if len(c.order) > c.max {
			delete(c.sizes, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.sizes[id] = size
}

// initLocked makes the origins' memories. Under c.mu.
func (c *sizeCache) initLocked() {
	if c.origins == nil {
		c.origins = sizes.NewKeyed[sizeID](maxSizeOrigins, originSamples)
		c.recent = sizes.MakeRecent(originSamples)
	}
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
