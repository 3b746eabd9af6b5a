package intents

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// scriptedSplitter keeps responses where they are (its Move names no
// path) and splits, when asked, the last parts[0] bytes onto the mover's
// to, the next time the next part, and then none.
type scriptedSplitter struct {
	*scriptedMover
	mu    sync.Mutex
	parts []int64
	asked atomic.Int32
	move  atomic.Pointer[Path] // where Move moves to: nowhere while nil
}

func (s *scriptedSplitter) Move(*Request, *Candidate) (*Path, string) {
	return s.move.Load(), "scripted move"
}

// Decide decides as the scriptedMover, on the paths permitted: a part's
// request requires the path it was split onto.
func (s *scriptedSplitter) Decide(req *Request, d *Decision) {
	s.scriptedMover.Decide(req, d)
	d.Choices = slices.DeleteFunc(d.Choices, func(c Choice) bool {
		return c.Reuse == nil && !slices.Contains(req.Paths, c.Path)
	})
	if len(d.Choices) == 0 {
		d.Choices = append(d.Choices, Choice{Path: req.Paths[0]})
	}
}

func (s *scriptedSplitter) Split(req *Request, from *Candidate) (*Path, int64, string) {
	s.asked.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parts) == 0 {
		return nil, 0, "scripted: whole"
	}
	part := s.parts[0]
	s.parts = s.parts[1:]
	return s.to.Load(), part, "scripted split"
}

// splitPaths is movePaths with a scriptedSplitter that splits parts onto
// p2, in turn.
func splitPaths(t *testing.T, srv *httptest.Server, parts ...int64) (*Transport, *scriptedSplitter, string) {
	t.Helper()
	var sp *scriptedSplitter
	tr, _, base := movePathsWith(t, srv, func(m *scriptedMover) Policy {
		sp = &scriptedSplitter{scriptedMover: m, parts: parts}
		return sp
	})
	return tr, sp, base
}

// splitServer serves /obj, an object of size bytes with ETag "v1" taking
// byte ranges: a GET without a Range gets the first 64 KiB, then, once
// rest is closed, the rest of it; one with a Range is answered by part
// (http.ServeContent of the object if nil). It logs every request.
func splitServer(size int64, rest <-chan struct{}, part http.HandlerFunc, log *requestLog) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("Range") != "" {
			if part != nil {
				part(w, r)
				return
			}
			http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
			return
		}
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		obj := testbed.NewObject(size)
		io.CopyN(w, obj, 64<<10)
		w.(http.Flusher).Flush()
		select {
		case <-rest:
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Second): // a test that failed: the body ends, and its assertions say why
		}
		io.Copy(w, obj) // the client closes the connection at the split part's first byte
	}))
}

// awaitClosed waits for ch to be closed, failing the test with why if it
// is not within 10 s.
func awaitClosed(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

// startLastPart answers a request for the last part bytes of the object
// of size bytes with a 206 of them, and sends the first n.
func startLastPart(w http.ResponseWriter, size, part, n int64) {
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", size-part, size-1, size))
	w.Header().Set("Content-Length", strconv.FormatInt(part, 10))
	w.WriteHeader(http.StatusPartialContent)
	obj := testbed.NewObject(size)
	io.CopyN(io.Discard, obj, size-part)
	io.CopyN(w, obj, n)
	w.(http.Flusher).Flush()
}

// The last part of a response is fetched on the path the policy names,
// with a range request of the same version (If-Range), while the first
// part keeps arriving where it was: the caller reads one object, byte for
// byte, and the first connection is closed at the part's first byte.
func TestSplitSharesTheRestWithAnotherPath(t *testing.T) {
	checkEveryRead(t)
	const size, part = 1_000_003, 300_000
	var log requestLog
	partIn := make(chan struct{})
	srv := splitServer(size, partIn, nil, &log)
	defer srv.Close()
	tr, sp, base := splitPaths(t, srv, part)
	tr.testHookSplitRead = func(got int64) {
		if got == part {
			close(partIn) // the first part's rest comes once the part is in: it is the sooner
		}
	}
	var mu sync.Mutex
	var splits []DecisionInfo
	ctx := WithDecisionTrace(context.Background(), func(di DecisionInfo) {
		if di.Moving != nil && di.SplitPart > 0 {
			mu.Lock()
			splits = append(splits, di)
			mu.Unlock()
		}
	})
	ctx = WithIntents(ctx, Intents{SizeToBeReceived: size}) // as predicted: no move at the headers
	body, _ := get(t, tr, ctx, base+"/obj")
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256([]byte(body)), "the whole object, byte for byte")
	assert.Equal(t, []string{"/obj  ", fmt.Sprintf("/obj bytes=%d-%d \"v1\"", size-part, size-1)}, log.all())
	assert.GreaterOrEqual(t, sp.asked.Load(), int32(2), "asked at the start, and again once the part was in")
	st := tr.Stats()
	assert.EqualValues(t, 1, st["p1"].Split)
	assert.EqualValues(t, 1, st["p1"].Requests)
	assert.EqualValues(t, 1, st["p2"].Requests, "the part, on the path the policy named")
	assert.Zero(t, st["p1"].Moved)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, splits, 1)
	assert.EqualValues(t, part, splits[0].SplitPart)
	assert.Equal(t, []Choice{{Path: sp.to.Load(), Fresh: true}}, splits[0].Choices)
	assert.Equal(t, "scripted split", splits[0].Reason, "split first: Move is not asked")
}

// Once a part is in, the first part's rest is split again: the next part,
// just before it, is fetched while the first part keeps arriving. Taken
// or dropped at its first byte (here: all in, or its answer not begun),
// the part after it follows from memory, and the first connection is
// not read beyond what the first part and a dropped part need: its
// server sends no more.
func TestSplitPartsInTurn(t *testing.T) {
	const size, part1, part2 = 1_000_003, 300_000, 200_001
	const lastFirst = size - part1 - part2 - 1 // the first part's last byte
	for _, taken := range []bool{true, false} {
		t.Run(map[bool]string{true: "taken", false: "dropped"}[taken], func(t *testing.T) {
			checkEveryRead(t)
			var log requestLog
			in1, in2, cancelled := make(chan struct{}), make(chan struct{}), make(chan struct{})
			wait := func(r *http.Request, ch <-chan struct{}) bool {
				select {
				case <-ch:
					return true
				case <-r.Context().Done():
				case <-time.After(10 * time.Second): // a test that failed: its assertions say why
				}
				return false
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				log.add(r)
				w.Header().Set("ETag", `"v1"`)
				if rg := r.Header.Get("Range"); rg != "" {
					if !taken && rg == fmt.Sprintf("bytes=%d-%d", lastFirst+1, size-part1-1) {
						close(in2) // the first part comes on; this never answers
						<-r.Context().Done()
						close(cancelled)
						return
					}
					http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
					return
				}
				w.Header().Set("Accept-Ranges", "bytes")
				w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
				obj := testbed.NewObject(size)
				// In steps: until the first part is in, until the next is
				// asked for (and in, or not answering), then the first
				// part (and the dropped part's bytes), and no more.
				upTo := []int64{64 << 10, 128 << 10, lastFirst + 1}
				if !taken {
					upTo[2] += part2
				}
				sent := int64(0)
				for i, n := range upTo {
					io.CopyN(w, obj, n-sent)
					w.(http.Flusher).Flush()
					sent = n
					if i < 2 && !wait(r, []chan struct{}{in1, in2}[i]) {
						return
					}
				}
				wait(r, nil) // the client closes the connection at a part's first byte
			}))
			defer srv.Close()
			tr, _, base := splitPaths(t, srv, part1, part2)
			var begun atomic.Int32
			tr.testHookSplitRead = func(got int64) {
				switch n := begun.Load(); {
				case got == 0:
					begun.Add(1)
				case n == 1 && got == part1:
					close(in1)
				case n == 2 && got == part2:
					close(in2)
				}
			}
			var mu sync.Mutex
			var parts []int64
			ctx := WithDecisionTrace(context.Background(), func(di DecisionInfo) {
				if di.SplitPart > 0 {
					mu.Lock()
					parts = append(parts, di.SplitPart)
					mu.Unlock()
				}
			})
			body, _ := get(t, tr, WithIntents(ctx, Intents{SizeToBeReceived: size}), base+"/obj")
			assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256([]byte(body)), "the whole object, byte for byte")
			assert.Equal(t, []string{"/obj  ", fmt.Sprintf("/obj bytes=%d-%d \"v1\"", size-part1, size-1),
				fmt.Sprintf("/obj bytes=%d-%d \"v1\"", lastFirst+1, size-part1-1)}, log.all(), "the second part just before the first")
			st := tr.Stats()
			assert.EqualValues(t, 2, st["p1"].Split)
			assert.EqualValues(t, 2, st["p2"].Requests)
			mu.Lock()
			assert.Equal(t, []int64{part1, part2}, parts)
			mu.Unlock()
			if !taken {
				awaitClosed(t, cancelled, "the dropped part's request was not cancelled")
			}
		})
	}
}

// Once a part is taken, the rest is the parts': the body does not move
// (its rest asked for again elsewhere, the parts thrown away), whatever
// the policy's Move would say.
func TestSplitTakenPartIsNotMoved(t *testing.T) {
	checkEveryRead(t)
	const size, part = 1_000_003, 300_000
	var log requestLog
	partIn := make(chan struct{})
	srv := splitServer(size, partIn, nil, &log)
	defer srv.Close()
	tr, sp, base := splitPaths(t, srv, part)
	tr.testHookSplitRead = func(got int64) {
		if got == part {
			close(partIn)
		}
	}
	req, err := http.NewRequestWithContext(WithIntents(context.Background(), Intents{SizeToBeReceived: size}), "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	h := sha256.New()
	_, err = io.CopyN(h, resp.Body, size-part) // the first part
	require.NoError(t, err)
	sp.move.Store(sp.to.Load()) // from now on the policy would move it
	// Many Reads, each a check.
	_, err = io.Copy(h, io.LimitReader(iotest.OneByteReader(resp.Body), 64<<10))
	require.NoError(t, err)
	// Whether the policy is asked at all depends on when the pool sees
	// the first connection closed; the body must not ask it either way.
	b, ok := resp.Body.(*resumingBody)
	require.True(t, ok, "%T", resp.Body)
	assert.Nil(t, b.move, "a body reading its parts does not move")
	_, err = io.Copy(h, resp.Body)
	require.NoError(t, err)
	assert.Equal(t, testbed.ObjectSum(size), [32]byte(h.Sum(nil)), "the whole object, byte for byte")
	assert.Len(t, log.all(), 2, "the object and its part; nothing asked again: %q", log.all())
	assert.Zero(t, tr.Stats()["p1"].Moved)
}

// A part whose answer has not begun when the first part is in, or that
// has arrived slower than the first part since it was asked for, is
// abandoned (its request cancelled): the rest comes where the first part
// did, and nothing waits for the slower path.
func TestSplitAbandonedIfNotSooner(t *testing.T) {
	const size, part, behind = 1_000_003, 300_000, 10_000
	for _, begins := range []bool{false, true} {
		t.Run(map[bool]string{false: "not begun", true: "behind"}[begins], func(t *testing.T) {
			checkEveryRead(t)
			var log requestLog
			rest, cancelled := make(chan struct{}), make(chan struct{})
			srv := splitServer(size, rest, func(w http.ResponseWriter, r *http.Request) {
				if begins {
					startLastPart(w, size, part, behind)
				} else {
					close(rest) // the first part's rest comes now; this never answers
				}
				<-r.Context().Done()
				close(cancelled)
			}, &log)
			defer srv.Close()
			tr, sp, base := splitPaths(t, srv, part)
			tr.testHookSplitRead = func(got int64) {
				if got == behind {
					close(rest) // the first part's rest comes with the part this far behind
				}
			}
			body, _ := get(t, tr, WithIntents(context.Background(), Intents{SizeToBeReceived: size}), base+"/obj")
			assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256([]byte(body)), "the whole object, from the first connection")
			assert.EqualValues(t, 1, sp.asked.Load())
			assert.EqualValues(t, 1, tr.Stats()["p1"].Split)
			awaitClosed(t, cancelled, "the abandoned part's request was not cancelled")
		})
	}
}

// A part that is not the bytes asked for, of the same version, is never
// used: a server that ignores If-Range and sends another version, one
// that sends another range, one that sends the whole object. The rest
// comes where the first part did, so the body is of one version.
func TestSplitUsesOnlyThePartAskedFor(t *testing.T) {
	const size, part = 1_000_003, 300_000
	other := bytes.Repeat([]byte{'x'}, size) // another version's bytes
	for name, answer := range map[string]func(w http.ResponseWriter, r *http.Request){
		"another version": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"v2"`)
			r.Header.Del("If-Range") // as a server that ignores it
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(other))
		},
		"another range": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", size-part-1, size-2, size))
			w.Header().Set("Content-Length", strconv.Itoa(part))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(other[:part])
		},
		"the whole object": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.Write(other)
		},
	} {
		t.Run(name, func(t *testing.T) {
			checkEveryRead(t)
			var log requestLog
			answered := make(chan struct{})
			srv := splitServer(size, answered, func(w http.ResponseWriter, r *http.Request) {
				answer(w, r)
				close(answered) // the first part's rest comes after this answer
			}, &log)
			defer srv.Close()
			tr, sp, base := splitPaths(t, srv, part)
			body, _ := get(t, tr, WithIntents(context.Background(), Intents{SizeToBeReceived: size}), base+"/obj")
			assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256([]byte(body)), "one version, byte for byte")
			assert.EqualValues(t, 1, sp.asked.Load())
			assert.Len(t, log.all(), 2)
		})
	}
}

// A part that fails once the caller reads it is asked for again, from the
// byte reached, on another path than the part's: the body is whole.
func TestSplitPartFailingIsResumed(t *testing.T) {
	checkEveryRead(t)
	const size, part, sent = 1_000_003, 300_000, 290_000
	var log requestLog
	mostIn, fail := make(chan struct{}), make(chan struct{})
	var ranges atomic.Int32
	srv := splitServer(size, mostIn, func(w http.ResponseWriter, r *http.Request) {
		if ranges.Add(1) > 1 { // the resumed rest
			http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
			return
		}
		startLastPart(w, size, part, sent)
		select {
		case <-fail:
		case <-r.Context().Done():
		}
		panic(http.ErrAbortHandler) // the connection breaks mid-part
	}, &log)
	defer srv.Close()
	tr, _, base := splitPaths(t, srv, part)
	tr.testHookSplitRead = func(got int64) {
		if got == sent {
			close(mostIn) // the first part's rest comes once most of the part is in: it is the sooner
		}
	}
	req, err := http.NewRequestWithContext(WithIntents(context.Background(), Intents{SizeToBeReceived: size}), "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	h := sha256.New()
	// The first part and the part's first byte: the body has turned to the
	// part before it fails.
	_, err = io.CopyN(h, resp.Body, size-part+1)
	require.NoError(t, err)
	close(fail)
	_, err = io.Copy(h, resp.Body)
	require.NoError(t, err)
	assert.Equal(t, testbed.ObjectSum(size), [32]byte(h.Sum(nil)), "the whole object, byte for byte")
	got := log.all()
	require.Len(t, got, 3)
	assert.Equal(t, fmt.Sprintf("/obj bytes=%d-%d \"v1\"", size-part+sent, size-1), got[2], "from the byte reached")
	st := tr.Stats()
	assert.EqualValues(t, 2, st["p1"].Requests, "the object, and the part's rest: not on the part's path")
	assert.EqualValues(t, 1, st["p2"].Requests)
}

// Closing a body while its part is fetched ends the part's request too.
func TestSplitEndsWithTheBody(t *testing.T) {
	checkEveryRead(t)
	const size, part = 1_000_003, 300_000
	var log requestLog
	arrived, cancelled := make(chan struct{}), make(chan struct{})
	srv := splitServer(size, nil, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(cancelled)
	}, &log)
	defer srv.Close()
	tr, sp, base := splitPaths(t, srv, part)
	req, err := http.NewRequestWithContext(WithIntents(context.Background(), Intents{SizeToBeReceived: size}), "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.CopyN(io.Discard, resp.Body, 32<<10)
	require.NoError(t, err)
	require.EqualValues(t, 1, sp.asked.Load())
	<-arrived
	require.NoError(t, resp.Body.Close())
	awaitClosed(t, cancelled, "the part's request outlived the body")
}

// A part is asked for only where it can have a connection at once: at the
// host's limit, with the one connection busy with the response itself, it
// would wait in the queue until the response is in.
func TestSplitOnlyWithAConnectionThere(t *testing.T) {
	checkEveryRead(t)
	const size, part = 1_000_003, 300_000
	var log requestLog
	now := make(chan struct{})
	close(now)
	srv := splitServer(size, now, nil, &log)
	defer srv.Close()
	tr, sp, base := splitPaths(t, srv, part)
	tr.MaxConnsPerHost = 1
	body, _ := get(t, tr, WithIntents(context.Background(), Intents{SizeToBeReceived: size}), base+"/obj")
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256([]byte(body)))
	assert.Positive(t, sp.asked.Load(), "asked")
	assert.Len(t, log.all(), 1, "no part asked for")
	assert.Zero(t, tr.Stats()["p1"].Split)
}
