package intents

import "net/url"

// objectOf names the object at u for the size cache (ok false: u is not
// an http or https URL).
func (t *Transport) objectOf(u *url.URL) (objectKey, bool) {
	o, err := t.originOf(u)
	if err != nil {
		return objectKey{}, false
	}
	return objectKey{o.key, u.RequestURI()}, true
}

// rememberSize remembers the size of the object at u.
func (t *Transport) rememberSize(u *url.URL, size int64) {
	if k, ok := t.objectOf(u); ok {
		learnSize(t.sizes, t.core, k, size)
	}
}

// knownSize is the last size of the object at u, 0 if none is known.
func (t *Transport) knownSize(u *url.URL) int64 {
	if k, ok := t.objectOf(u); ok {
		return t.sizes.get(k)
	}
	return 0
}
