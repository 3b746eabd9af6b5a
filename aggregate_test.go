package intents

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/mptcp"
)

// objectServer serves an object of size bytes of testbed.ObjectByte with
// Range, If-Range and an ETag, counting the range requests.
func objectServer(t *testing.T, size int64) (*httptest.Server, *rangeLog) {
	var log rangeLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
	}))
	t.Cleanup(srv.Close)
	return srv, &log
}

func TestAggregateByteIdentical(t *testing.T) {
	const size = 3_000_017
	srv, log := objectServer(t, size)
	tr := &Transport{Aggregate: &Aggregate{MinChunk: 64 << 10, MinSize: 1}}
	defer tr.CloseIdleConnections()
	body := fetchAll(t, tr, srv.URL)
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(body), "byte for byte the object")
	ranges := log.get()
	assert.Greater(t, len(ranges), 3, "fetched in ranges")
	assert.Equal(t, "bytes=0-65535", ranges[0], "first a small range that tells the size")
	// The ranges cover the object exactly once (no duplicates on loopback,
	// where one path is all there is).
	var covered int64
	for _, r := range ranges {
		var from, to int64
		_, err := fmt.Sscanf(r, "bytes=%d-%d", &from, &to)
		require.NoError(t, err, r)
		covered += to - from + 1
	}
	assert.EqualValues(t, size, covered)
}

func TestAggregateSmallAndUnsplittable(t *testing.T) {
	// Below MinSize by the size hint: one plain request.
	srv, log := objectServer(t, 100_000)
	tr := &Transport{Aggregate: &Aggregate{}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(WithIntents(t.Context(), Intents{SizeToBeReceived: 100_000}), "GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, []string{""}, log.get(), "no Range")

	// The whole object in the first range: that is the answer.
	body := fetchAll(t, tr, srv.URL)
	assert.Len(t, body, 100_000)

	// A server that ignores Range gives its 200 once.
	var plain atomic.Int32
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plain.Add(1)
		w.Write(bytes.Repeat([]byte("x"), 2_000_000))
	}))
	defer srv2.Close()
	assert.Len(t, fetchAll(t, tr, srv2.URL), 2_000_000)
	assert.EqualValues(t, 1, plain.Load())

	// multipath=off: not split.
	req, _ = http.NewRequestWithContext(WithIntents(t.Context(), Intents{Multipath: MultipathOff}), "GET", srv.URL, nil)
	_, ok := tr.aggregateConfig(req)
	assert.False(t, ok)
	// multipath=aggregate without the field: ranges only where MPTCP is
	// not available.
	req, _ = http.NewRequestWithContext(WithIntents(t.Context(), Intents{Multipath: MultipathAggregate}), "GET", srv.URL, nil)
	_, ok = (&Transport{}).aggregateConfig(req)
	assert.Equal(t, mptcp.Supported() != nil, ok)
}

// TestAggregateNeverStitchesTwoVersions changes the object after the
// second range: the body is the old version whole, or ends with ErrObjectChanged.
func TestAggregateNeverStitchesTwoVersions(t *testing.T) {
	const size = 2_000_000
	var ranges atomic.Int32
	old, changed := content(size, 1), content(size, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		obj, tag := old, `"old"`
		if ranges.Add(1) > 2 {
			obj, tag = changed, `"new"`
		}
		w.Header().Set("ETag", tag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(obj))
	}))
	defer srv.Close()
	tr := &Transport{Aggregate: &Aggregate{MinChunk: 64 << 10, MinSize: 1}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorIs(t, err, ErrObjectChanged)
	assert.Equal(t, old[:len(got)], got, "what was delivered is all of the old version")
}

// TestAggregateBoundedMemory reads a large object slowly through a small
// window and checks what the body held never passed the window by more
// than the chunks in flight. INTENTS_AGGREGATE_SIZE sets the size (default
// 64 MB; the 200 MB figure in the notes came from it).
func TestAggregateBoundedMemory(t *testing.T) {
	size := int64(64e6)
	if s := os.Getenv("INTENTS_AGGREGATE_SIZE"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		size = n
	}
	srv, _ := objectServer(t, size)
	cfg := &Aggregate{MinChunk: 256 << 10, Window: 4 << 20, MinSize: 1}
	tr := &Transport{Aggregate: cfg}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	h := sha256.New()
	buf := make([]byte, 64<<10)
	var peakHeap uint64
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if n%(8<<20) < int64(k) { // every 8 MB
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peakHeap = max(peakHeap, ms.HeapInuse)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
	}
	b := resp.Body.(*aggBody)
	resp.Body.Close()
	assert.EqualValues(t, size, n)
	assert.Equal(t, testbed.ObjectSum(size), [32]byte(h.Sum(nil)))
	t.Logf("%d MB object: peak held in chunks %.1f MiB (window %d MiB), heap in use at most %.1f MiB (%.1f before)",
		size/1e6, float64(b.peak)/(1<<20), cfg.Window>>20, float64(peakHeap)/(1<<20), float64(before.HeapInuse)/(1<<20))
	assert.LessOrEqual(t, b.peak, cfg.Window+16*cfg.MinChunk, "bounded by the window and one chunk")
}

// An aggregated download's ranges are the Transport's requests: its
// statistics count each range and every byte, by path.
func TestAggregateCountsItsRangesInTheTransportStats(t *testing.T) {
	srv, _ := objectServer(t, 1_000_000)
	tr := &Transport{Aggregate: &Aggregate{MinChunk: 64 << 10, MinSize: 1}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	st := tr.Stats()[""] // the OS-routed loopback
	assert.EqualValues(t, 1_000_000, st.BytesReceived)
	assert.Greater(t, st.Requests, int64(1), "the first range and the rest")
}
