package pageload

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"time"

	"github.com/sockintents/intents"
)

// Browser connection limits (Chrome's, as in the paper's prototype), for
// the transports a Loader uses: give an intents.Transport MaxConnsPerHost
// and MaxConns, an http.Transport MaxConnsPerHost.
const (
	MaxConnsPerHost = 6
	MaxConns        = 17
)

// Loader loads workloads through an HTTP transport like a browser: an
// object is requested once all it depends on has arrived, in page order.
// Like a browser's page loader it hands every ready request to the network
// stack at once, which queues it until one of its connections is free:
// the transport keeps the connection limits, and sees the whole queue (an
// intents.Transport's policy decides with it). MaxPerHost and MaxTotal, if
// set, also bound the requests in flight, per server and in all.
type Loader struct {
	Transport http.RoundTripper
	// URL returns the URL of object i (of size bytes) on server host.
	URL func(host int, size int64, i int) string
	// SizeIntents attaches each object's size as an intent
	// (Intents.SizeToBeReceived); without it an intents.Transport learns
	// sizes itself (its two-step download).
	SizeIntents bool
	// PathOf names the path of the connection an object came over; nil
	// leaves ObjectResult.Path empty.
	PathOf func(net.Conn) string
	// PathHeader, if set, names a response header that names the path
	// instead (a proxy's: see proxy.Server.PathHeader).
	PathHeader string
	// MaxPerHost and MaxTotal bound the requests in flight; 0: no bound.
	MaxPerHost, MaxTotal int
}

// ObjectResult is what happened to one object, times from the load's start.
type ObjectResult struct {
	Start, End time.Duration
	Bytes      int64
	Path       string
}

// Result is one page load.
type Result struct {
	// PLT is the page load time as the paper measures it: network time,
	// from the first request to the last byte of the last object.
	PLT     time.Duration
	Bytes   int64
	Objects []ObjectResult
}

// PathCounts counts the objects per path.
func (r Result) PathCounts() map[string]int {
	n := map[string]int{}
	for _, o := range r.Objects {
		n[o.Path]++
	}
	return n
}

type done struct {
	i   int
	res ObjectResult
	err error
}

// Load loads w once. It fails on the first object that fails (after the
// requests in flight have returned), and with an error if a body is not
// the object's size.
func (l *Loader) Load(ctx context.Context, w Workload) (Result, error) {
	if err := w.Validate(); err != nil {
		return Result{}, err
	}
	maxHost := cmp.Or(l.MaxPerHost, len(w.Objects))
	maxTotal := cmp.Or(l.MaxTotal, len(w.Objects))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	n := len(w.Objects)
	waiting := make([]int, n) // unfinished dependencies
	dependents := make([][]int, n)
	var ready []int // in page order
	for i, o := range w.Objects {
		waiting[i] = len(o.Deps)
		for _, d := range o.Deps {
			dependents[d] = append(dependents[d], i)
		}
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	res := Result{Objects: make([]ObjectResult, n)}
	perHost := make([]int, w.Hosts())
	inFlight, finished := 0, 0
	results := make(chan done)
	var firstErr error
	start := time.Now()
	for finished < n {
		// Start what the limits allow, in page order; an object whose server
		// is at its limit does not hold back those of other servers.
		for k := 0; k < len(ready) && inFlight < maxTotal && firstErr == nil; {
			i := ready[k]
			h := w.Objects[i].Host
			if perHost[h] >= maxHost {
				k++
				continue
			}
			ready = slices.Delete(ready, k, k+1)
			perHost[h]++
			inFlight++
			go func() { results <- l.fetch(ctx, start, w.Objects[i], i) }()
		}
		if inFlight == 0 { // only after an error: nothing more will start
			break
		}
		d := <-results
		inFlight--
		perHost[w.Objects[d.i].Host]--
		if d.err != nil {
			if firstErr == nil {
				firstErr = d.err
				cancel()
			}
			continue
		}
		finished++
		res.Objects[d.i] = d.res
		res.Bytes += d.res.Bytes
		res.PLT = max(res.PLT, d.res.End)
		for _, j := range dependents[d.i] {
			if waiting[j]--; waiting[j] == 0 {
				k, _ := slices.BinarySearch(ready, j)
				ready = slices.Insert(ready, k, j)
			}
		}
	}
	if firstErr != nil {
		return Result{}, firstErr
	}
	return res, nil
}

func (l *Loader) fetch(ctx context.Context, start time.Time, o Object, i int) done {
	if l.SizeIntents {
		ctx = intents.WithIntents(ctx, intents.Intents{SizeToBeReceived: o.Size})
	}
	var conn net.Conn
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(g httptrace.GotConnInfo) { conn = g.Conn }})
	url := l.URL(o.Host, o.Size, i)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return done{i: i, err: err}
	}
	r := ObjectResult{Start: time.Since(start)}
	resp, err := l.Transport.RoundTrip(req)
	if err != nil {
		return done{i: i, err: fmt.Errorf("pageload: object %d (%s): %w", i, url, err)}
	}
	r.Bytes, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.End = time.Since(start)
	switch {
	case err != nil:
		return done{i: i, err: fmt.Errorf("pageload: object %d (%s): %w", i, url, err)}
	case resp.StatusCode != http.StatusOK:
		return done{i: i, err: fmt.Errorf("pageload: object %d (%s): %s", i, url, resp.Status)}
	case r.Bytes != o.Size:
		return done{i: i, err: fmt.Errorf("pageload: object %d (%s): %d bytes, want %d", i, url, r.Bytes, o.Size)}
	}
	switch {
	case l.PathHeader != "":
		r.Path = resp.Header.Get(l.PathHeader)
	case l.PathOf != nil && conn != nil:
		r.Path = l.PathOf(conn)
	}
	return done{i: i, res: r}
}
