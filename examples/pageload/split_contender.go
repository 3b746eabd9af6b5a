//go:build linux

package main

import (
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sockintents/intents"
)

// splitSetupRTTs is how many of its round trips a path is counted to take
// before its first bytes, in staticSplit's placement: a handshake, the
// request, and a round of slow start. (Over the presets, 1 put too much
// on the slower path, 5 too little.)
const splitSetupRTTs = 3

// staticSplit is a reference, not a scheduler a program could use: it is
// told every object's size (the size intent the loader attaches) and the
// paths' true rates and RTTs, gives path 1 a fixed number of the host's
// connections and path 2 the rest (each path a net/http Transport of its
// own), and places each request as it comes where the bytes placed so far
// would have it in first: splitSetupRTTs round trips, then the path's
// backlog and the object at the path's rate. A page's requests come at
// once, so this is a split of the page by the paths' rates decided before
// its first byte, carried by HTTP/1.1's connections and slow starts as
// they are: what such a split of the connections allows, measured.
type staticSplit struct {
	paths [2]http.RoundTripper
	rtt   [2]time.Duration
	rate  [2]float64 // bytes/s

	mu      sync.Mutex
	backlog [2]float64 // bytes placed on each path and not read yet
}

// newStaticSplit gives path 1 conns1 of perHost connections (half if 0,
// and at least one to each path).
func newStaticSplit(conns1, perHost int, cfg config) *staticSplit {
	if conns1 <= 0 {
		conns1 = perHost / 2
	}
	conns1 = max(min(conns1, perHost-1), 1)
	s := &staticSplit{}
	for i, dev := range []string{"p1", "p2"} {
		n := conns1
		if i == 1 {
			n = max(perHost-conns1, 1)
		}
		tr := boundTransport(dev, n)
		tr.MaxIdleConnsPerHost = n
		s.paths[i] = tr
		s.rtt[i] = cfg.RTT[i]
		s.rate[i] = float64(cfg.Rate[i]) / 8
	}
	return s
}

// RoundTrip places req on a path and sends it there.
func (s *staticSplit) RoundTrip(req *http.Request) (*http.Response, error) {
	var size float64
	if in, ok := intents.FromContext(req.Context()); ok {
		size = float64(max(in.SizeToBeReceived, 0))
	}
	s.mu.Lock()
	path, pathAt := 0, 0.0
	for i := range s.paths {
		at := splitSetupRTTs*s.rtt[i].Seconds() + (s.backlog[i]+size)/s.rate[i]
		if i == 0 || at < pathAt {
			path, pathAt = i, at
		}
	}
	s.backlog[path] += size
	s.mu.Unlock()
	resp, err := s.paths[path].RoundTrip(req)
	if err != nil {
		s.took(path, size)
		return nil, err
	}
	resp.Body = &splitBody{ReadCloser: resp.Body, s: s, path: path, left: size}
	return resp, nil
}

// took takes n bytes off path's backlog.
func (s *staticSplit) took(path int, n float64) {
	s.mu.Lock()
	s.backlog[path] = max(s.backlog[path]-n, 0)
	s.mu.Unlock()
}

// CloseIdleConnections closes both paths' idle connections.
func (s *staticSplit) CloseIdleConnections() {
	for _, rt := range s.paths {
		if ci, ok := rt.(interface{ CloseIdleConnections() }); ok {
			ci.CloseIdleConnections()
		}
	}
}

// splitBody takes the bytes read off its path's backlog, and on Close
// what was placed and not read.
type splitBody struct {
	io.ReadCloser
	s    *staticSplit
	path int
	left float64
}

func (b *splitBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.left > 0 {
		d := min(float64(n), b.left)
		b.left -= d
		b.s.took(b.path, d)
	}
	return n, err
}

func (b *splitBody) Close() error {
	if b.left > 0 {
		b.s.took(b.path, b.left)
		b.left = 0
	}
	return b.ReadCloser.Close()
}
