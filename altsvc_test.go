package intents

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseAltSvc(t *testing.T) {
	for _, tc := range []struct {
		in    string
		ok    bool
		clear bool
		want  []altValue
	}{
		{in: `h3=":443"`, ok: true, want: []altValue{{proto: "h3", port: 443, maxAge: maxAltSvcAge}}},
		{in: `h3=":8443"; ma=60; persist=1, h2="alt.example:443"`, ok: true, want: []altValue{
			{proto: "h3", port: 8443, maxAge: time.Minute}, {proto: "h2", host: "alt.example", port: 443, maxAge: maxAltSvcAge}}},
		{in: `h3-29=":443";ma=10,h3=":443";ma="20"`, ok: true, want: []altValue{
			{proto: "h3-29", port: 443, maxAge: 10 * time.Second}, {proto: "h3", port: 443, maxAge: 20 * time.Second}}},
		{in: `h%33=":1"`, ok: true, want: []altValue{{proto: "h3", port: 1, maxAge: maxAltSvcAge}}},
		{in: `h3="[::1]:443"`, ok: true, want: []altValue{{proto: "h3", host: "::1", port: 443, maxAge: maxAltSvcAge}}},
		{in: `h3=":443"; ma=99999999999999999999999`, ok: true, want: []altValue{{proto: "h3", port: 443, maxAge: maxAltSvcAge}}},
		{in: `h3=":443"; ma=2592000`, ok: true, want: []altValue{{proto: "h3", port: 443, maxAge: maxAltSvcAge}}},
		{in: `clear`, ok: true, clear: true},
		{in: ` clear `, ok: true, clear: true},
		{in: ``, ok: true},
		{in: `h3=":0"`},
		{in: `h3=":65536"`},
		{in: `h3=":+1"`},
		{in: `h3=":443`},
		{in: `h3=:443`},
		{in: `h3=""`},
		{in: `h3=":443"; ma=-1`},
		{in: `h3=":443"; ma=1.5`},
		{in: `h3=":443"; ma=`},
		{in: `h3=":443" junk`},
		{in: `h%3=":443"`},
		{in: `h%zz=":443"`},
		{in: `="":443"`},
		{in: "h3=\":44\x013\""},
		{in: `clear, h3=":443"`},
	} {
		alts, clear, ok := parseAltSvc(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.clear, clear, tc.in)
		assert.Equal(t, tc.want, alts, tc.in)
	}
	// Work stays bounded whatever the header's length.
	alts, _, ok := parseAltSvc(strings.Repeat(`h3=":1", `, 10000) + `h3=":2"`)
	assert.True(t, ok)
	assert.Len(t, alts, maxAltValues)
}

func TestAltSvcCache(t *testing.T) {
	var c altSvcCache
	now := time.Now()
	const key = "https://a.example:443"
	_, ok := c.lookup(key, "p1", 443, false, now)
	assert.False(t, ok, "nothing advertised")
	port, ok := c.lookup(key, "p1", 443, true, now)
	assert.True(t, ok)
	assert.Equal(t, uint16(443), port, "always: the origin's own port")

	c.learn(key, "a.example", []string{`h2=":1"`, `h3="A.EXAMPLE:8443"; ma=60`}, now)
	port, ok = c.lookup(key, "p1", 443, false, now)
	assert.True(t, ok)
	assert.Equal(t, uint16(8443), port, "two header fields are one list; the host compares without case")
	_, ok = c.lookup(key, "p1", 443, false, now.Add(61*time.Second))
	assert.False(t, ok, "expired with its ma")

	c.learn(key, "a.example", []string{`junk junk`}, now)
	port, _ = c.lookup(key, "p1", 443, false, now)
	assert.Equal(t, uint16(8443), port, "a header that does not parse changes nothing")
	c.learn(key, "a.example", []string{`clear`}, now)
	_, ok = c.lookup(key, "p1", 443, false, now)
	assert.False(t, ok, "cleared")

	c.learn(key, "a.example", []string{`h3=":8443"`}, now)
	c.markBroken(key, "p1", now)
	_, ok = c.lookup(key, "p1", 443, true, now.Add(brokenHTTP3-time.Second))
	assert.False(t, ok, "broken: not even with always")
	_, ok = c.lookup(key, "p1", 443, false, now.Add(brokenHTTP3))
	assert.True(t, ok, "tried again after a while")
	c.markBroken(key, "p1", now)
	_, ok = c.lookup(key, "p1", 443, false, now.Add(brokenHTTP3+time.Second))
	assert.False(t, ok, "a second failure in a row: twice as long")
	for range 20 {
		c.markBroken(key, "p1", now)
	}
	_, ok = c.lookup(key, "p1", 443, true, now.Add(maxBrokenHTTP3))
	assert.True(t, ok, "at most a day")
	c.markWorking(key, "p1")
	c.markBroken(key, "p1", now)
	_, ok = c.lookup(key, "p1", 443, false, now.Add(brokenHTTP3))
	assert.True(t, ok, "a success starts the count afresh")
	c.markBroken(key, "p1", now)
	_, ok = c.lookup(key, "p2", 443, false, now)
	assert.True(t, ok, "broken on one path only")

	// Memory stays bounded by maxOrigins.
	for i := range 3 * maxOrigins {
		c.learn(key+string(rune('a'+i%26))+strings.Repeat("x", i/26), "a.example", []string{`h3=":1"`}, now)
	}
	for i := range 3 * maxOrigins {
		c.markBroken(key, strings.Repeat("x", i), now)
	}
	assert.LessOrEqual(t, len(c.alts), maxOrigins)
	assert.LessOrEqual(t, len(c.broken), maxOrigins)
}
