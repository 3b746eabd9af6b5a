package intents_test

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"slices"
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
	tr := &intents.Transport{Manager: m}
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
	req, err := http.NewRequestWithContext(ctx, "GET", objURL+"2000000", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	require.NoError(t, err)
	assert.EqualValues(t, 2e6, n)
	assert.Equal(t, testbed.ObjectSum(2e6), [32]byte(h.Sum(nil)), "byte for byte the object")
	st := tr.Stats()
	assert.LessOrEqual(t, st["p1"].Moved, int64(1), "moved at most once (after a split, its first part)")
	assert.LessOrEqual(t, st["p1"].Split, int64(4), "at most four parts (maxSplitParts)")
	assert.Positive(t, st["p1"].Moved+st["p1"].Split, "its rest went from path 1 to path 2")
	t.Logf("2 MB in %v; bytes read on p1 %d, on p2 %d; move decisions: %q", time.Since(start).Round(time.Millisecond),
		st["p1"].BytesReceived, st["p2"].BytesReceived, moves)
}
