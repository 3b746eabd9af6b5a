//go:build linux

package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
)

// countingPath answers every request at once with a body of the size the
// request's intent says, and counts the requests.
type countingPath struct {
	mu sync.Mutex
	n  int
}

func (c *countingPath) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	in, _ := intents.FromContext(req.Context())
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", int(in.SizeToBeReceived)))), Request: req}, nil
}

// The split places a page's requests, made at once, by the paths' rates
// and round trips, and gives back what was placed as it is read.
func TestStaticSplitPlacesByRate(t *testing.T) {
	var p1, p2 countingPath
	// The asymmetric preset: 12 Mbit/s at 20 ms, 5 Mbit/s at 100 ms.
	s := newStaticSplit(3, 6, config{RTT: []time.Duration{20 * time.Millisecond, 100 * time.Millisecond}, Rate: []int64{12e6, 5e6}})
	s.paths = [2]http.RoundTripper{&p1, &p2}
	var bodies []io.ReadCloser
	for range 32 {
		req, err := http.NewRequestWithContext(intents.WithIntents(t.Context(), intents.Intents{SizeToBeReceived: 100_000}), http.MethodGet, "http://example.test/", nil)
		require.NoError(t, err)
		resp, err := s.RoundTrip(req)
		require.NoError(t, err)
		bodies = append(bodies, resp.Body)
	}
	// Both paths finish together: 0.06 s + n1·0.0667 s = 0.3 s + n2·0.16 s
	// with n1 + n2 = 32 puts 8 on path 2 (0.3 + 1.28 against 0.06 + 1.6).
	assert.Equal(t, 24, p1.n, "path 1")
	assert.Equal(t, 8, p2.n, "path 2")
	assert.Equal(t, [2]float64{2_400_000, 800_000}, s.backlog)
	_, err := io.ReadAll(bodies[0])
	require.NoError(t, err)
	assert.Equal(t, 2_300_000.0, s.backlog[0], "what was read is off its path's backlog")
	for _, b := range bodies {
		require.NoError(t, b.Close())
	}
	assert.Equal(t, [2]float64{0, 0}, s.backlog, "and what was placed and not read, once closed")
}

// The split keeps at least one connection on each path.
func TestStaticSplitConnections(t *testing.T) {
	cfg := config{RTT: []time.Duration{time.Millisecond, time.Millisecond}, Rate: []int64{1e6, 1e6}}
	for _, c := range []struct{ conns1, perHost, want1, want2 int }{
		{0, 6, 3, 3}, {2, 6, 2, 4}, {5, 6, 5, 1}, {9, 6, 5, 1}, {0, 1, 1, 1},
	} {
		s := newStaticSplit(c.conns1, c.perHost, cfg)
		assert.Equal(t, c.want1, s.paths[0].(*http.Transport).MaxConnsPerHost, "%+v: path 1", c)
		assert.Equal(t, c.want2, s.paths[1].(*http.Transport).MaxConnsPerHost, "%+v: path 2", c)
	}
}
