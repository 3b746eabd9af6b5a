package intents

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// maxAltSvcAge bounds how long an advertised HTTP/3 alternative is
// remembered, whatever its ma says (24 h is RFC 7838's default).
const maxAltSvcAge = 24 * time.Hour

// maxAltValues bounds the alternatives of one Alt-Svc header looked at.
const maxAltValues = 16

// altSvcCache remembers, per origin, the HTTP/3 alternative it advertised
// with Alt-Svc (RFC 7838), and per origin and path whether HTTP/3 failed
// there lately (UDP may be blocked on one network and not another).
// Origins are held as keyed hashes (see sizeID), as a Knowledge file
// keeps them.
type altSvcCache struct {
	key [32]byte // keys the origins' hashes: the Transport's sizes' key

	mu     sync.Mutex
	alts   map[sizeID]altSvc       // by the pool's origin key's hash
	broken map[brokenKey]brokenFor // HTTP/3 failed or lost a race
	at     time.Time               // when either last changed (zero: never)
}

type altSvc struct {
	port    uint16
	expires time.Time
}

type brokenKey struct {
	origin sizeID
	path   string
}

func (c *altSvcCache) id(origin string) sizeID { return keyedID(c.key, 'o', origin) }

// brokenFor: not tried again before until; d doubles with each failure in
// a row.
type brokenFor struct {
	until time.Time
	d     time.Duration
}

// lookup returns the UDP port to try HTTP/3 at for the origin key (whose
// own port is port) on the named path, if any: the advertised one, else
// with always the origin's own; none while it is marked broken there.
func (c *altSvcCache) lookup(key, path string, port uint16, always bool, now time.Time) (uint16, bool) {
	id := c.id(key)
	c.mu.Lock()
	a := c.alts[id]
	b := c.broken[brokenKey{id, path}]
	c.mu.Unlock()
	switch {
	case now.Before(b.until):
		return 0, false
	case a.port != 0 && now.Before(a.expires):
		return a.port, true
	case always:
		return port, true
	}
	return 0, false
}

// learn takes the origin's Alt-Svc header values (host is its host): as
// RFC 7838 says, they replace what it advertised before. Only "h3" at the
// origin's own host (any port) is taken: an alternative at another host
// would send the origin's requests to an address its name does not
// resolve to. A header that does not parse changes nothing.
func (c *altSvcCache) learn(key, host string, values []string, now time.Time) {
	alts, clear, ok := parseAltSvc(strings.Join(values, ","))
	if !ok {
		return
	}
	var a altSvc
	if !clear {
		for _, v := range alts {
			if v.proto == "h3" && (v.host == "" || strings.EqualFold(v.host, host)) && v.maxAge > 0 {
				a = altSvc{port: v.port, expires: now.Add(v.maxAge)}
				break
			}
		}
	}
	id := c.id(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = now
	if a.port == 0 {
		delete(c.alts, id)
		return
	}
	c.alts = bounded(c.alts, id, func(a altSvc) bool { return now.Before(a.expires) })
	c.alts[id] = a
}

// markBroken leaves the origin on TCP on the named path for a while.
func (c *altSvcCache) markBroken(key, path string, now time.Time) {
	k := brokenKey{c.id(key), path}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = now
	b := c.broken[k]
	b.d = min(max(2*b.d, brokenHTTP3), maxBrokenHTTP3)
	b.until = now.Add(b.d)
	c.broken = bounded(c.broken, k, func(b brokenFor) bool { return now.Before(b.until) })
	c.broken[k] = b
}

// markWorking forgets the origin's failures on the named path.
func (c *altSvcCache) markWorking(key, path string) {
	k := brokenKey{c.id(key), path}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.broken[k]; ok {
		delete(c.broken, k)
		c.at = time.Now()
	}
}

// bounded makes room for key in m, which keeps at most maxOrigins
// entries: those no longer live go first; if all are, the memory starts
// afresh.
func bounded[K comparable, V any](m map[K]V, key K, live func(V) bool) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	if _, ok := m[key]; ok || len(m) < maxOrigins {
		return m
	}
	for k, v := range m {
		if !live(v) {
			delete(m, k)
		}
	}
	if len(m) >= maxOrigins {
		clear(m)
	}
	return m
}

// altValue is one alternative of an Alt-Svc header.
type altValue struct {
	proto  string // the ALPN protocol ID, percent-decoded
	host   string // "": the origin's
	port   uint16
	maxAge time.Duration
}

// parseAltSvc parses an Alt-Svc field value (RFC 7838 section 3):
// "clear", or alternatives such as h3=":443"; ma=3600. ok is false if it
// does not parse; alternatives past maxAltValues are not looked at.
func parseAltSvc(v string) (alts []altValue, clear, ok bool) {
	v = strings.TrimSpace(v)
	if v == "clear" {
		return nil, true, true
	}
	for len(v) > 0 && len(alts) < maxAltValues {
		var a altValue
		var authority, rest, h, p string
		var err error
		a.proto, authority, rest, ok = altParam(v)
		if !ok || !strings.HasPrefix(authority, `"`) {
			return nil, false, false
		}
		if a.proto, err = url.PathUnescape(a.proto); err != nil { // RFC 3986 percent-encoding
			return nil, false, false
		}
		if authority, ok = unquote(authority); !ok {
			return nil, false, false
		}
		h, p, err = net.SplitHostPort(authority)
		if err != nil {
			return nil, false, false
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil || port == 0 || strings.ContainsAny(p, "+-") {
			return nil, false, false
		}
		a.host, a.port, a.maxAge = h, uint16(port), maxAltSvcAge
		v = rest
		for strings.HasPrefix(v, ";") {
			var name, value string
			if name, value, v, ok = altParam(strings.TrimLeft(v[1:], " \t")); !ok {
				return nil, false, false
			}
			if strings.EqualFold(name, "ma") {
				if value, ok = unquote(value); !ok {
					return nil, false, false
				}
				if a.maxAge, ok = deltaSeconds(value, maxAltSvcAge); !ok {
					return nil, false, false
				}
			}
		}
		alts = append(alts, a)
		if !strings.HasPrefix(v, ",") {
			if v != "" {
				return nil, false, false
			}
			break
		}
		v = strings.TrimLeft(v[1:], " \t")
	}
	return alts, false, true
}

// altParam splits name=value (a token, or a quoted string kept quoted)
// off the front of v; rest starts at the next ";" or "," (spaces before
// it dropped).
func altParam(v string) (name, value, rest string, ok bool) {
	eq := strings.IndexByte(v, '=')
	if eq <= 0 || !isToken(v[:eq]) {
		return "", "", "", false
	}
	name, v = v[:eq], v[eq+1:]
	end := 0
	if strings.HasPrefix(v, `"`) {
		end = 1
		for ; end < len(v) && v[end] != '"'; end++ {
			if v[end] == '\\' {
				end++
			}
		}
		if end >= len(v) {
			return "", "", "", false
		}
		end++
	} else {
		for end < len(v) && isTokenChar(v[end]) {
			end++
		}
		if end == 0 {
			return "", "", "", false
		}
	}
	value, rest = v[:end], strings.TrimLeft(v[end:], " \t")
	if rest != "" && rest[0] != ';' && rest[0] != ',' {
		return "", "", "", false
	}
	return name, value, rest, true
}

// unquote removes a quoted string's quotes and escapes; a token is itself.
func unquote(s string) (string, bool) {
	if !strings.HasPrefix(s, `"`) {
		return s, true
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '\\' {
			i++
		}
		if s[i] < ' ' && s[i] != '\t' || s[i] == 0x7f {
			return "", false
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

// deltaSeconds parses a non-negative number of seconds, capped at limit.
func deltaSeconds(s string, limit time.Duration) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > uint64(limit/time.Second) { // too large to parse: past the cap
		return limit, true
	}
	return time.Duration(n) * time.Second, true
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}

func isTokenChar(b byte) bool { return httpguts.IsTokenRune(rune(b)) }
