package intents_test

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

// TestNetnsMove fetches a 2 MB object, with no size hint, through a fresh
// Manager with EAF over a near slow path (10 ms, 2 Mbit/s) and a far fast
// one (60 ms, 50 Mbit/s): placed as an object of unknown size on the path
// with the shorter round trip, its rest goes to path 2 once its size and
// the rate it arrives at are known (moved, or split, in parts, and the
// first part moved after), and it arrives byte for byte.
func TestNetnsMove(t *testing.T) {
	testbed.SkipIfShort(t, "5 s")
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{
		Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 2e6), testbed.Symmetric(60*time.Millisecond, 50e6)},
	})
	web, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsMoveChild", "move")
	var got []string
	for _, r := range web.Requests() {
		if r.URI == "/obj/2000000" {
			got = append(got, r.Remote.Addr().String()+" "+r.Range)
			t.Logf("%s from %s, Range %q: %d bytes sent", r.URI, r.Remote.Addr(), r.Range, r.Bytes)
		}
	}
	// The first on path 1, whole (cut short once its rest went
	// elsewhere), then on path 2: the rest (moved, or its last parts
	// split, up to maxSplitParts), or all of it if it moved at the
	// headers; after a split, the first part's rest.
	slices.Sort(got)
	require.NotEmpty(t, got)
	assert.Equal(t, "10.71.1.1 ", got[0], "first on path 1, whole")
	rest := got[1:]
	if assert.NotEmpty(t, rest, "its rest on path 2") && assert.LessOrEqual(t, len(rest), 5, "%q", got) {
		for _, r := range rest {
			assert.Regexp(t, `^10\.71\.2\.1 (bytes=[1-9][0-9]*-[1-9][0-9]*)?$`, r, "on path 2")
		}
		assert.True(t, slices.ContainsFunc(rest, func(r string) bool { return strings.HasSuffix(r, "-1999999") || r == "10.71.2.1 " }),
			"%q: one of them to its end", rest)
	}
}

func TestNetnsMoveChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsMove")
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
		Policy: &policy.EAF{}, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	// Raced, the object would go to path 2 whole (see TestNetnsFirstRace).
	tr := &intents.Transport{Manager: m, DisableFirstRace: true}
	defer tr.Close()
	var mu sync.Mutex
	var moves []string
	ctx := intents.WithDecisionTrace(context.Background(), func(di intents.DecisionInfo) {
		if di.Moving != nil {
			mu.Lock()
			moves = append(moves, di.Reason)
			mu.Unlock()
		}
	})
	start := time.Now()
	getObject(ctx, t, tr, objURL+"2000000", 2e6)
	st := tr.Stats()
	assert.LessOrEqual(t, st["p1"].Moved, int64(1), "moved at most once (after a split, its first part)")
	assert.LessOrEqual(t, st["p1"].Split, int64(4), "at most four parts (maxSplitParts)")
	assert.Positive(t, st["p1"].Moved+st["p1"].Split, "its rest went from path 1 to path 2")
	t.Logf("2 MB in %v; bytes read on p1 %d, on p2 %d; move decisions: %q", time.Since(start).Round(time.Millisecond),
		st["p1"].BytesReceived, st["p2"].BytesReceived, moves)
}

// TestNetnsMoveOffStall fetches a 4 MB object from a server that stops
// sending after 1 MB, over paths whose round trips (100 and 120 ms) are too
// long for a stalled connection to be closed by the dead-path watch:
//
//   - move (a policy that moves responses but does not split them; path 2
//     at 5 Mbit/s, its capacity shown by a download first): the body's
//     move is judged on a timer while nothing arrives, and its rest, once
//     the rate it has come at so far falls below path 2's, asked for on
//     path 2. There the server trickles it (8 kB every half second): the
//     rest, which no Read-driven move check watches (a response moves
//     once), is judged in its pauses and leaves for path 1 again, where it
//     comes at once. Each wait alone would outlast the download's ten
//     seconds.
//   - split (EAF, 20 and 40 ms): the last part is split onto path 2, the
//     first part's stalled connection resumes on path 1 with a range that
//     ends where the part begins, and the part, trickling, is abandoned:
//     the first part's range ends short of the body's, and the rest is
//     asked for, never an early end of the body.
func TestNetnsMoveOffStall(t *testing.T) {
	testbed.SkipIfShort(t, "5 s")
	testbed.RequireRoot(t)
	for _, scenario := range []string{"move", "split"} {
		t.Run(scenario, func(t *testing.T) {
			paths := []testbed.PathSpec{testbed.Symmetric(100*time.Millisecond, 20e6), testbed.Symmetric(120*time.Millisecond, 5e6)}
			if scenario == "split" {
				paths = []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 20e6), testbed.Symmetric(40*time.Millisecond, 20e6)}
			}
			tb := testbed.New(t, testbed.Spec{Servers: 2, Paths: paths})
			web, err := tb.StartWeb(testbed.WebOptions{NoMPTCP: true})
			require.NoError(t, err)
			hold := make(chan struct{})
			t.Cleanup(func() { close(hold) }) // before the server's own cleanup: it waits for its handlers
			web.Handle(tb.Hosts[1].String(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"stall"`)
				obj := testbed.NewObject(stallObject)
				switch {
				case r.Header.Get("Range") == "":
					w.Header().Set("Accept-Ranges", "bytes")
					w.Header().Set("Content-Length", strconv.Itoa(stallObject))
					_, _ = io.CopyN(w, obj, 1_000_000)
					_ = http.NewResponseController(w).Flush()
					select { // stops sending, its connection open
					case <-hold:
					case <-r.Context().Done():
					}
					_, _ = io.Copy(w, obj)
				case strings.HasPrefix(r.RemoteAddr, "10.71.2."):
					http.ServeContent(&trickle{w: w, done: r.Context().Done()}, r, "", time.Time{}, obj)
				default:
					http.ServeContent(w, r, "", time.Time{}, obj)
				}
			}))
			testbed.RunTest(t, tb.Client, "TestNetnsMoveOffStallChild", scenario)
			var got []string
			for _, r := range web.Requests() {
				if r.URI == "/" {
					got = append(got, r.Remote.Addr().String()+" "+r.Range)
				}
			}
			t.Logf("requests: %q", got)
			if scenario == "move" {
				require.Len(t, got, 3, "whole on path 1, its rest on path 2, the rest of that on path 1")
				assert.Equal(t, "10.71.1.1 ", got[0])
				assert.Regexp(t, `^10\.71\.2\.1 bytes=[1-9][0-9]*-3999999$`, got[1])
				assert.Regexp(t, `^10\.71\.1\.1 bytes=[1-9][0-9]*-3999999$`, got[2])
				return
			}
			assert.True(t, slices.ContainsFunc(got, func(r string) bool {
				return strings.HasPrefix(r, "10.71.1.1 bytes=") && !strings.HasSuffix(r, "-3999999")
			}), "the first part resumed on path 1, up to the split part")
		})
	}
}

const stallObject = 4_000_000

// trickle sends what is written to w 8 kB at a time, half a second
// apart: a path (or server) that delivers next to nothing, in bursts.
type trickle struct {
	w    http.ResponseWriter
	done <-chan struct{}
	tick *time.Ticker
}

func (t *trickle) Header() http.Header  { return t.w.Header() }
func (t *trickle) WriteHeader(code int) { t.w.WriteHeader(code) }
func (t *trickle) Write(p []byte) (int, error) {
	if t.tick == nil {
		t.tick = time.NewTicker(500 * time.Millisecond)
	}
	var n int
	for len(p) > 0 {
		k, err := t.w.Write(p[:min(len(p), 8<<10)])
		n += k
		if err != nil {
			return n, err
		}
		_ = http.NewResponseController(t.w).Flush()
		p = p[k:]
		select {
		case <-t.tick.C:
		case <-t.done:
			t.tick.Stop()
			return n, http.ErrAbortHandler
		}
	}
	return n, nil
}

// moveOnly is EAF that moves responses but never splits them.
type moveOnly struct{ eaf *policy.EAF }

func (p moveOnly) Decide(req *intents.Request, d *intents.Decision) { p.eaf.Decide(req, d) }
func (p moveOnly) Move(req *intents.Request, c *intents.Candidate) (*intents.Path, string) {
	return p.eaf.Move(req, c)
}

func TestNetnsMoveOffStallChild(t *testing.T) {
	scenario := testbed.ChildArg(t, "TestNetnsMoveOffStall")
	var pol intents.Policy = &policy.EAF{}
	if scenario == "move" {
		pol = moveOnly{&policy.EAF{}}
	}
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
		Policy: pol, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	tr := &intents.Transport{Manager: m}
	defer tr.Close()
	if scenario == "move" {
		warm := intents.WithIntents(context.Background(), intents.Intents{Interfaces: map[string]intents.Level{"p2": intents.LevelRequire}})
		req, err := http.NewRequestWithContext(warm, "GET", objURL+"1000000", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.False(t, m.Path("p2").Estimate().BandwidthFloor, "path 2's capacity shown")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	getObject(ctx, t, tr, "http://10.71.100.2/", stallObject)
	st := tr.Stats()
	t.Logf("4 MB in %v; moved off p1 %d, off p2 %d", time.Since(start).Round(time.Millisecond), st["p1"].Moved, st["p2"].Moved)
}

// getObject fetches url, a testbed object of size bytes, through tr and
// checks it byte for byte.
func getObject(ctx context.Context, t *testing.T, tr *intents.Transport, url string, size int64) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	require.NoError(t, err)
	assert.EqualValues(t, size, n)
	assert.Equal(t, testbed.ObjectSum(size), [32]byte(h.Sum(nil)), "byte for byte the object")
}
