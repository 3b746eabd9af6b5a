package intents

import (
	"net/url"
	"sync"
)

// Where a request's expected size (Intents.SizeToBeReceived, as the policy
// sees it) came from; see DecisionInfo.SizeSource.
const (
	// SizeFromIntents: the caller's intents said.
	SizeFromIntents = "intents"
	// SizeFromURL: the last response to the same URL (Transport).
	SizeFromURL = "url"
	// SizeFromOrigin: the mean of the origin's recent responses, for a URL
	// not seen before (Transport): a page's objects are often alike, and
	// a policy placing load needs expected bytes more than exact ones.
	SizeFromOrigin = "origin"
)

// sizeCache remembers response sizes as hints for later requests: each
// URL's last Content-Length (forgetting the oldest URLs beyond max), and
// each origin's recent sizes, whose mean stands for URLs it has not seen.
type sizeCache struct {
	max     int
	mu      sync.Mutex
	sizes   map[string]int64
	order   []string
	origins map[string]*originSizes
}

// originSizes are an origin's last originSamples response sizes.
type originSizes struct {
	recent [originSamples]int64
	n, i   int
	sum    int64
}

const (
	originSamples = 32
	// maxSizeOrigins bounds the origins remembered; past it the memory
	// starts afresh.
	maxSizeOrigins = 256
)

// get returns the last size of url, 0 if none is known.
func (c *sizeCache) get(url string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sizes[url]
}

// predict returns the size to expect for url of origin and where it came
// from: the URL's last size, else the origin's recent mean; 0 and "" if
// neither is known.
func (c *sizeCache) predict(url, origin string) (int64, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.sizes[url]; ok {
		return n, SizeFromURL
	}
	if o := c.origins[origin]; o != nil && o.n > 0 {
		return o.sum / int64(o.n), SizeFromOrigin
	}
	return 0, ""
}

// originMean is the mean of origin's recent sizes, if any are known.
func (c *sizeCache) originMean(origin string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.origins[origin]; o != nil && o.n > 0 {
		return o.sum / int64(o.n), true
	}
	return 0, false
}

// put remembers size for url of origin.
func (c *sizeCache) put(url, origin string, size int64) {
	if c.max <= 0 || size < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sizes == nil {
		c.sizes = map[string]int64{}
	}
	if _, ok := c.sizes[url]; !ok {
		c.order = append(c.order, url)
		if len(c.order) > c.max {
			delete(c.sizes, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.sizes[url] = size
	o := c.origins[origin]
	if o == nil {
		if c.origins == nil || len(c.origins) >= maxSizeOrigins {
			c.origins = map[string]*originSizes{}
		}
		o = &originSizes{}
		c.origins[origin] = o
	}
	if o.n == originSamples {
		o.sum -= o.recent[o.i]
	} else {
		o.n++
	}
	o.recent[o.i] = size
	o.sum += size
	o.i = (o.i + 1) % originSamples
}

// rememberSize remembers the size of the object at u.
func (t *Transport) rememberSize(u *url.URL, size int64) {
	if o, err := t.originOf(u); err == nil {
		t.sizes.put(u.String(), o.key, size)
	}
}
