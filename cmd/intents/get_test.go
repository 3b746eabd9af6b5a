package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The bar shows each path's bytes and rate as they arrive, and the time
// left at their sum; it draws at most every drawEvery.
func TestProgressDrawsRatesAndTimeLeft(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, 10e6)
	p.on = true // as on a terminal
	start := p.last
	p.draw(start.Add(drawEvery/2), 0, map[string]int64{"p1": 1})
	assert.Empty(t, out.String(), "not due yet")

	p.draw(start.Add(drawEvery), 1.5e6, map[string]int64{"p1": 1e6, "p2": 0.5e6})
	first := out.String()
	assert.Contains(t, first, " 15 %")
	assert.Contains(t, first, "# p1 1.0 MB 10.0 MB/s")
	assert.Contains(t, first, "= p2 0.5 MB 5.0 MB/s")
	assert.Contains(t, first, "ETA 1s", "8.5 MB left at 15 MB/s")
	assert.Contains(t, first, "[####==......", "a segment per path, in proportion")

	out.Reset()
	p.draw(start.Add(2*drawEvery), 2.5e6, map[string]int64{"p1": 2e6, "p2": 0.5e6})
	assert.Contains(t, out.String(), "= p2 0.5 MB 2.5 MB/s", "a stalled path's rate falls")
	assert.Contains(t, out.String(), "ETA 1s", "7.5 MB left at 12.5 MB/s")
}
