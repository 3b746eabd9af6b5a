package intents_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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

// TestNetnsRestartDecidesAsWarm: a Manager and Transport load two pages
// over a near slow path (10 ms, 2 Mbit/s) and a far fast one (100 ms,
// 50 Mbit/s, whose 100 kB transfers end in slow start: they show only a
// floor of its capacity), and save what they learnt; a new pair starts
// from the file.
// From then on, given the same requests in the same state of what is in
// flight, and the same measurements after, each of their decisions (the
// size predicted and where from, the paths' estimates, the choices and
// the predicted arrivals they stood on, whether a first request races) is
// the warm pair's. Every saved input is needed: drop one from the file and
// some decision differs (the mutants named restart-* in .ci/mutants).
func TestNetnsRestartDecidesAsWarm(t *testing.T) {
	testbed.SkipIfShort(t, "5 s")
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{Servers: 2,
		Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 2e6), testbed.Symmetric(100*time.Millisecond, 50e6)}})
	_, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsRestartDecidesAsWarmChild", "restart")
}

// restartOrigins: the page's own origin, one of its other hosts, and one
// neither pair has heard from.
var restartOrigins = []string{"http://10.71.100.1", "http://10.71.100.2", "http://10.71.100.3"}

func TestNetnsRestartDecidesAsWarmChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsRestartDecidesAsWarm")
	file := filepath.Join(t.TempDir(), "paths.json")
	pair := func() (*intents.Manager, *intents.Transport) {
		m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
			Policy: &policy.EAF{}, NoWatch: true, ResolvConf: os.DevNull, Knowledge: file})
		require.NoError(t, err)
		return m, &intents.Transport{Manager: m, MaxConnsPerHost: intents.DefaultMaxConnsPerHost, MaxConns: intents.DefaultMaxConns}
	}
	warmM, warm := pair()
	defer warmM.Close()
	defer warm.Close()
	// Two pages: a 10 kB root, then its objects at once, 100 kB ones on
	// its own host and small ones on another.
	for page := range 2 {
		loadRestartPage(t, warm, page)
	}
	warm.CloseIdleConnections()
	// What each path showed: what a restart has to keep of both.
	require.False(t, warmM.Path("p1").Estimate().BandwidthFloor, "the slow path's capacity shown")
	require.True(t, warmM.Path("p2").Estimate().BandwidthFloor, "the fast path's only a floor")
	for _, p := range warmM.Paths() {
		e := p.Estimate()
		t.Logf("%s after the pages: %+v", p.Name, e)
		require.Zero(t, e.Active, "%s: nothing in flight once the pages are in", p.Name)
		require.Zero(t, e.Pending, p.Name)
		// A Manager that probed its paths, and counted their losses.
		intents.EstimatorOf(p).AddProbe(e.RTT + time.Millisecond)
		intents.EstimatorOf(p).AddLoss(1, 200)
	}
	intents.SaveKnowledgeNow(warmM)

	restM, rest := pair()
	defer restM.Close()
	defer rest.Close()
	pairs := []restartPair{{"warm", warmM, warm}, {"restarted", restM, rest}}
	compareRestart(t, "after the restart", pairs)

	// The same measurements from here on, at the same times: the pairs
	// still decide alike (what was saved goes on as it went on in the warm
	// one: smoothed RTTs, windowed maxima, medians of sizes).
	now := time.Now().Round(0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	for _, pr := range pairs {
		for _, p := range pr.m.Paths() {
			intents.EstimatorOf(p).SetClock(clock)
		}
	}
	steps := []struct {
		name string
		do   func(pr restartPair)
	}{
		{"RTT samples", func(pr restartPair) {
			est(pr, "p1").AddRTT(14 * time.Millisecond)
			est(pr, "p2").AddRTT(37 * time.Millisecond)
			est(pr, "p2").AddMinRTT(29 * time.Millisecond)
		}},
		{"a transfer and a first flight", func(pr restartPair) {
			est(pr, "p2").AddTransfer(100_000, 300_000, 70*time.Millisecond)
			est(pr, "p1").AddFirstFlight(14_000, 14_000, 60*time.Millisecond, 2*time.Millisecond)
		}},
		{"sizes", func(pr restartPair) {
			for i, o := range restartOrigins[:2] {
				req, _ := http.NewRequest("GET", o+"/next/"+strconv.Itoa(i), nil)
				intents.RememberSize(pr.t, req, int64(30_000*(i+1)))
			}
		}},
		{"past the capacity's window", func(pr restartPair) {
			advance(45 * time.Second)
			est(pr, "p2").AddDelivery(400_000, 200*time.Millisecond)
			est(pr, "p1").AddDelivery(20_000, 100*time.Millisecond)
		}},
		{"probes and losses", func(pr restartPair) {
			est(pr, "p1").AddProbe(12 * time.Millisecond)
			est(pr, "p2").AddLoss(3, 100)
		}},
	}
	for _, s := range steps {
		for _, pr := range pairs {
			s.do(pr)
		}
		compareRestart(t, "after "+s.name, pairs)
	}
}

type restartPair struct {
	name string
	m    *intents.Manager
	t    *intents.Transport
}

func est(pr restartPair, path string) interface {
	AddRTT(time.Duration)
	AddMinRTT(time.Duration)
	AddTransfer(bytes, pathBytes int64, d time.Duration)
	AddFirstFlight(bytes, pathBytes int64, d, gap time.Duration)
	AddDelivery(bytes int64, d time.Duration)
	AddProbe(time.Duration)
	AddLoss(lost, sent uint64)
} {
	return intents.EstimatorOf(pr.m.Path(path))
}

// loadRestartPage loads page number page through tr: its root, then its
// objects at once.
func loadRestartPage(t *testing.T, tr *intents.Transport, page int) {
	ctx := context.Background()
	getObject(ctx, t, tr, fmt.Sprintf("%s/obj/10000?page=%d", restartOrigins[0], page), 10000)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			size, origin := int64(100_000), restartOrigins[0]
			if i%3 == 2 {
				size, origin = 5000, restartOrigins[1]
			}
			getObject(ctx, t, tr, fmt.Sprintf("%s/obj/%d?page=%d&i=%d", origin, size, page, i), size)
		})
	}
	wg.Wait()
}

// restartBurst are the requests each pair is asked to place, in turn, as
// a page's burst: URLs seen before, new ones at both origins heard from,
// and at one not heard from.
func restartBurst() []string {
	var urls []string
	for i := range 6 {
		urls = append(urls, fmt.Sprintf("%s/obj/100000?page=1&i=%d", restartOrigins[0], i))
	}
	for i := range 6 {
		urls = append(urls, fmt.Sprintf("%s/new/%d", restartOrigins[i%3], i))
	}
	return urls
}

// decisionView is what a decision is compared by: the pairs' paths are
// their own, so by name.
type decisionView struct {
	Size       int64
	SizeSource string
	Choices    []string
	Reason     string
	Queued     int64
	Race       [2]string
	Settled    bool
	Err        string
	Estimates  map[string]intents.Estimate
}

func viewOf(nd intents.NextDecision) decisionView {
	v := decisionView{Size: nd.Info.Intents.SizeToBeReceived, SizeSource: nd.Info.SizeSource, Reason: nd.Info.Reason,
		Queued: nd.Info.Queued, Race: nd.Race, Settled: nd.Settled, Estimates: map[string]intents.Estimate{}}
	for _, c := range nd.Info.Choices {
		v.Choices = append(v.Choices, c.String())
	}
	if err := cmpErr(nd.Prepared, nd.Decided); err != "" {
		v.Err = err
	}
	for _, p := range nd.Info.Permitted {
		v.Estimates[p.Name] = comparable(p.Estimate())
	}
	return v
}

func cmpErr(errs ...error) string {
	for _, err := range errs {
		if err != nil {
			return err.Error()
		}
	}
	return ""
}

// comparable is e less what says whether it stands on an earlier
// Manager's knowledge, which is all a restart may change.
func comparable(e intents.Estimate) intents.Estimate {
	e.Remembered, e.Age = false, 0
	return e
}

// compareRestart asks every pair to place restartBurst, request by
// request, each seeing the ones placed before it in flight (a busy
// connection on the path chosen, its bytes pending there) and the rest
// queued behind it, and checks that every pair decides as the first.
func compareRestart(t *testing.T, when string, pairs []restartPair) {
	t.Helper()
	var want []decisionView
	for k, pr := range pairs {
		got := placeBurst(pr)
		if k == 0 {
			want = got
			continue
		}
		for i := range want {
			if !assert.Equal(t, want[i], got[i], "%s, request %d (%s): the %s pair decides as the %s one", when, i, restartBurst()[i], pr.name, pairs[0].name) {
				return
			}
		}
	}
}

// placeBurst places restartBurst on pr without sending anything, and
// undoes what it counted in flight.
func placeBurst(pr restartPair) []decisionView {
	urls := restartBurst()
	var views []decisionView
	cands := map[string][]intents.Candidate{} // by host
	type inFlight struct {
		p    *intents.Path
		size int64
	}
	var counted []inFlight
	for i, u := range urls {
		host := u[:strings.Index(u[len("http://"):], "/")+len("http://")]
		first := intents.DecideNext(pr.t, u, nil, 0)
		later := 0
		for _, next := range urls[i+1:] {
			if strings.HasPrefix(next, host+"/") {
				later++
			}
		}
		nd := intents.DecideNext(pr.t, u, cands[host], int64(later)*first.Info.Intents.SizeToBeReceived)
		v := viewOf(nd)
		v.Estimates = nil
		if i == 0 {
			v.Estimates = viewOf(nd).Estimates
		}
		views = append(views, v)
		if len(nd.Info.Choices) == 0 {
			continue
		}
		c := nd.Info.Choices[0]
		p := c.Path
		if c.Reuse != nil {
			p = c.Reuse.Path
		}
		if p == nil {
			continue
		}
		size := nd.Info.Intents.SizeToBeReceived
		p = pr.m.Path(p.Name)
		intents.EstimatorOf(p).AddActive(1)
		intents.EstimatorOf(p).AddPending(size)
		counted = append(counted, inFlight{p, size})
		cands[host] = append(cands[host], intents.Candidate{ID: uint64(i + 1), Path: p, InFlight: 1, Pending: size})
	}
	for _, f := range counted {
		intents.EstimatorOf(f.p).AddActive(-1)
		intents.EstimatorOf(f.p).AddPending(-f.size)
	}
	return views
}
