package intents

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const twoStepN = 8 << 10

func content(size int, version byte) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i%251) ^ version
	}
	return b
}

// fetchAll GETs url through tr and checks the response looks like a plain
// 200 of the whole object.
func fetchAll(t *testing.T, tr http.RoundTripper, url string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("Content-Range"))
	if resp.ContentLength >= 0 {
		assert.EqualValues(t, len(body), resp.ContentLength)
	}
	return body
}

type rangeLog struct {
	mu     sync.Mutex
	ranges []string
}

func (l *rangeLog) add(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ranges = append(l.ranges, r.Header.Get("Range"))
}

func (l *rangeLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ranges...)
}

func TestTwoStepRangeServer(t *testing.T) {
	var log rangeLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		var size int
		fmt.Sscanf(r.URL.Path, "/%d", &size)
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content(size, 0)))
	}))
	defer srv.Close()
	tr := &Transport{TwoStep: twoStepN}
	defer tr.CloseIdleConnections()
	for _, size := range []int{0, 1, twoStepN - 1, twoStepN, twoStepN + 1, 10 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			n := len(log.get())
			body := fetchAll(t, tr, fmt.Sprintf("%s/%d", srv.URL, size))
			assert.Equal(t, sha256.Sum256(content(size, 0)), sha256.Sum256(body), "byte-identical")
			ranges := log.get()[n:]
			switch {
			case size <= twoStepN: // for 0 bytes, ServeContent ignores the range: 200
				assert.Equal(t, []string{"bytes=0-8191"}, ranges, "all in the first part")
			default:
				assert.Equal(t, []string{"bytes=0-8191", "bytes=8192-"}, ranges)
			}
		})
	}
	// The size is now known: no split for the same URL again.
	n := len(log.get())
	fetchAll(t, tr, fmt.Sprintf("%s/%d", srv.URL, 10<<20))
	assert.Equal(t, []string{""}, log.get()[n:])
}

func TestTwoStepServerIgnoringRange(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := content(100000, 0)
			if !chunked {
				w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			}
			w.Write(body[:50000])
			http.NewResponseController(w).Flush()
			w.Write(body[50000:])
		}))
		tr := &Transport{TwoStep: twoStepN}
		body := fetchAll(t, tr, srv.URL)
		assert.Equal(t, content(100000, 0), body, "chunked=%v", chunked)
		tr.CloseIdleConnections()
		srv.Close()
	}
}

func TestTwoStepContentEncodingIsNotSplit(t *testing.T) {
	var log rangeLog
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(content(200000, 0))
	zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("ETag", `"gz"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(gz.Bytes()))
	}))
	defer srv.Close()
	tr := &Transport{TwoStep: twoStepN}
	defer tr.CloseIdleConnections()
	body := fetchAll(t, tr, srv.URL)
	assert.Equal(t, content(200000, 0), body, "decoded as a plain GET would")
	assert.Equal(t, []string{"bytes=0-8191", ""}, log.get())
}

func TestTwoStepNeverStitchesTwoVersions(t *testing.T) {
	var version atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := byte(version.Load())
		if strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") {
			version.Add(1) // the object changes right after the first part
		}
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, v))
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content(50000+int(v), v)))
	}))
	defer srv.Close()
	tr := &Transport{TwoStep: twoStepN}
	defer tr.CloseIdleConnections()
	body := fetchAll(t, tr, srv.URL)
	assert.Equal(t, content(50001, 1), body, "the whole new version, nothing of the old")
}

func TestTwoStepWithoutValidatorFallsBack(t *testing.T) {
	var log rangeLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content(30000, 0)))
	}))
	defer srv.Close()
	tr := &Transport{TwoStep: twoStepN}
	defer tr.CloseIdleConnections()
	assert.Equal(t, content(30000, 0), fetchAll(t, tr, srv.URL))
	assert.Equal(t, []string{"bytes=0-8191", ""}, log.get(), "no validator: a plain GET, never a blind stitch")
}

func TestTwoStepSkipsRequestsWithSizeOrRange(t *testing.T) {
	var log rangeLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", `"x"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content(30000, 0)))
	}))
	defer srv.Close()
	tr := &Transport{TwoStep: twoStepN}
	defer tr.CloseIdleConnections()
	ctx := WithIntents(context.Background(), Intents{SizeToBeReceived: 30000})
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/sized", nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	req, _ = http.NewRequest("GET", srv.URL+"/ranged", nil)
	req.Header.Set("Range", "bytes=5-9")
	resp, err = tr.RoundTrip(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, content(30000, 0)[5:10], b)
	assert.Equal(t, []string{"", "bytes=5-9"}, log.get())
}

func TestTwoStepRangeNotSatisfiable(t *testing.T) {
	var log rangeLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		if r.Header.Get("Range") != "" { // an empty object: no byte to range over
			w.Header().Set("Content-Range", "bytes */0")
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		w.Header().Set("Content-Length", "0")
	}))
	defer srv.Close()
	tr := &Transport{TwoStep: twoStepN}
	defer tr.CloseIdleConnections()
	assert.Empty(t, fetchAll(t, tr, srv.URL))
	assert.Equal(t, []string{"bytes=0-8191", ""}, log.get())
}
