package intents_test

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptrace"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/mptcp"
)

// TestNetnsAggregate downloads over 10 Mbit/s / 20 ms and 5 Mbit/s / 60 ms
// paths: each path alone, MPTCP, and aggregated in ranges; then takes
// path 1 down during aggregated and two-step downloads and under plain
// requests.
func TestNetnsAggregate(t *testing.T) {
	testbed.SkipIfShort(t, "40 s")
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{
		Paths: []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 10e6), testbed.Symmetric(60*time.Millisecond, 5e6)},
		MPTCP: &testbed.MPTCPSpec{},
	})
	_, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsAggregateChild", "aggregate")
}

const objURL = "http://10.71.100.1/obj/"

// setP1 sets path 1's device down or up (with its route back), and waits
// until m has seen it.
func setP1(t *testing.T, m *intents.Manager, up bool) {
	t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	out, err := exec.Command("ip", "link", "set", "p1", state).CombinedOutput()
	require.NoError(t, err, "%s", out)
	if up {
		out, err := exec.Command("ip", "route", "replace", "10.71.100.0/24", "dev", "p1", "metric", "100").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	deadline := time.After(10 * time.Second)
	for {
		changed := m.Changed()
		if p := m.Path("p1"); p != nil && p.Up == up {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the manager did not see p1 go %s", state)
		}
	}
}

// bytesSince is what tr received on each path since its statistics were
// before.
func bytesSince(tr *intents.Transport, before map[string]intents.PathStats) map[string]int64 {
	per := map[string]int64{}
	for name, s := range tr.Stats() {
		per[name] = s.BytesReceived - before[name].BytesReceived
	}
	return per
}

type got struct {
	sum     [32]byte
	n       int64
	goodput float64 // bit/s, first byte to last
	body    io.ReadCloser
}

// get downloads objURL+size through rt with intents, running during once
// after 40 % of the body.
func get(t *testing.T, rt http.RoundTripper, in intents.Intents, size int64, during func()) got {
	t.Helper()
	req, err := http.NewRequestWithContext(intents.WithIntents(context.Background(), in), "GET", objURL+strconv.FormatInt(size, 10), nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	h := sha256.New()
	one := make([]byte, 1)
	_, err = io.ReadFull(resp.Body, one)
	require.NoError(t, err)
	h.Write(one)
	first := time.Now()
	var n int64 = 1
	if during != nil {
		k, err := io.CopyN(h, resp.Body, size*2/5)
		require.NoError(t, err)
		n += k
		during()
	}
	k, err := io.Copy(h, resp.Body)
	require.NoError(t, err)
	n += k
	g := got{n: n, goodput: float64(n*8) / time.Since(first).Seconds(), body: resp.Body}
	copy(g.sum[:], h.Sum(nil))
	return g
}

func TestNetnsAggregateChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsAggregate")
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
		MPTCPEndpoints: true})
	require.NoError(t, err)
	defer m.Close()
	only := func(p string) intents.Intents {
		return intents.Intents{Multipath: intents.MultipathOff, Interfaces: map[string]intents.Level{p: intents.LevelRequire}}
	}
	plain := &intents.Transport{Manager: m}
	defer plain.CloseIdleConnections()
	agg := &intents.Transport{Manager: m, Aggregate: &intents.Aggregate{}}
	defer agg.CloseIdleConnections()

	// Each path alone, MPTCP, then aggregated: 4, 4, 6 and 20 MB.
	p1 := get(t, plain, only("p1"), 4e6, nil)
	p2 := get(t, plain, only("p2"), 4e6, nil)
	var mp got
	t.Run("mptcp", func(t *testing.T) {
		if err := mptcp.Supported(); err != nil {
			t.Skip("needs MPTCP in the kernel: ", err)
		}
		require.NoError(t, m.MPTCPError(), "the Manager's MPTCP endpoints")
		fresh := &intents.Transport{Manager: m} // no pooled plain TCP connection to reuse
		defer fresh.CloseIdleConnections()
		before := rxBytes(t)
		const size = 6e6
		mp = get(t, fresh, intents.Intents{Multipath: intents.MultipathAggregate,
			Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}}, size, nil)
		after := rxBytes(t)
		rx1, rx2 := after[0]-before[0], after[1]-before[1]
		t.Logf("MPTCP download of %.0f bytes: received by device p1 %d, p2 %d", size, rx1, rx2)
		assert.Equal(t, testbed.ObjectSum(size), mp.sum, "byte for byte the object")
		assert.Greater(t, rx1+rx2, int64(size), "the object came over the two devices")
		assert.Greater(t, rx2, int64(size/10), "a subflow on path 2 carried its part")

		// Handover through a Transport: path 2's subflow stays a backup,
		// with nothing beside it to make its endpoint a subflow's again
		// (an open aggregate connection would: closed first).
		fresh.CloseIdleConnections()
		handover := &intents.Transport{Manager: m}
		defer handover.CloseIdleConnections()
		before = rxBytes(t)
		got := get(t, handover, intents.Intents{Multipath: intents.MultipathHandover,
			Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}}, 3e6, nil)
		after = rxBytes(t)
		rx1, rx2 = after[0]-before[0], after[1]-before[1]
		t.Logf("MPTCP handover download of 3e6 bytes: received by device p1 %d, p2 %d", rx1, rx2)
		assert.Equal(t, testbed.ObjectSum(3e6), got.sum, "byte for byte the object")
		assert.Less(t, rx2, int64(3e6/20), "path 2 kept in reserve")
	})
	const big = 20e6
	before := agg.Stats()
	all := get(t, agg, intents.Intents{}, big, nil)
	per := bytesSince(agg, before)
	sum := p1.goodput + p2.goodput
	t.Logf("goodput: p1 %.2f, p2 %.2f, sum %.2f, MPTCP %.2f, aggregated ranges %.2f Mbit/s (%.0f %% of the sum); bytes per path %v",
		p1.goodput/1e6, p2.goodput/1e6, sum/1e6, mp.goodput/1e6, all.goodput/1e6, 100*all.goodput/sum, per)
	assert.Equal(t, testbed.ObjectSum(big), all.sum, "byte for byte the object")
	// Its speed against the sum is logged above, not asserted (a shared
	// machine's noise; it is a benchmark's figure): what is asserted is
	// that both paths carried their share.
	assert.Greater(t, per["p1"], int64(big/5), "path 1 carried its share")
	assert.Greater(t, per["p2"], int64(big/5), "path 2 carried its share")

	// Path 1 goes down at 40 % of an aggregated download.
	start := time.Now()
	before = agg.Stats()
	lost := get(t, agg, intents.Intents{}, 6e6, func() { setP1(t, m, false) })
	per = bytesSince(agg, before)
	t.Logf("aggregated, path 1 down at 40 %%: intact in %v, bytes per path %v", time.Since(start).Round(time.Millisecond), per)
	assert.Equal(t, testbed.ObjectSum(6e6), lost.sum, "intact over path 2")
	setP1(t, m, true)

	// Path 1 goes down at 40 % of a two-step download whose second part
	// came over it.
	two := &intents.Transport{Manager: m, TwoStep: 8 << 10}
	defer two.CloseIdleConnections()
	start = time.Now()
	lost = get(t, two, intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}}, 4e6,
		func() { setP1(t, m, false) })
	stats := two.Stats()
	t.Logf("two-step, path 1 down at 40 %%: intact in %v; body bytes p1 %d, p2 %d", time.Since(start).Round(time.Millisecond),
		stats["p1"].BytesReceived, stats["p2"].BytesReceived)
	assert.Equal(t, testbed.ObjectSum(4e6), lost.sum, "intact: the rest came over path 2")
	assert.Greater(t, stats["p2"].BytesReceived, int64(1e6), "resumed on path 2")
	assert.EqualValues(t, 1, stats["p1"].Resumed, "counted once, on the path it broke off on")
	setP1(t, m, true)

	// A GET waiting for its answer on path 1 when path 1 goes down is sent
	// again on path 2; a POST is not: it stays on its connection, and once
	// the link comes back its answer does too.
	for _, method := range []string{"GET", "POST"} {
		var mu sync.Mutex
		var conns []string
		wrote := make(chan struct{}, 2)
		ctx := httptrace.WithClientTrace(intents.WithIntents(context.Background(),
			intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}}),
			&httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) {
					p, _ := intents.PathOf(i.Conn)
					mu.Lock()
					conns = append(conns, p.Name)
					mu.Unlock()
				},
				WroteRequest: func(httptrace.WroteRequestInfo) { wrote <- struct{}{} },
			})
		req, err := http.NewRequestWithContext(ctx, method, objURL+"1000?delay=1s", nil)
		require.NoError(t, err)
		done := make(chan struct{})
		var resp *http.Response
		go func() {
			defer close(done)
			resp, err = plain.RoundTrip(req)
		}()
		<-wrote
		setP1(t, m, false)
		if method == "POST" {
			setP1(t, m, true) // the outage ends before the answer is due
		}
		<-done
		mu.Lock()
		t.Logf("%s with path 1 down while waiting for the answer: connections on %v, error %v", method, conns, err)
		require.NoError(t, err)
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.EqualValues(t, 1000, n)
		if method == "GET" {
			assert.Equal(t, []string{"p1", "p2"}, conns, "sent again on path 2")
		} else {
			assert.Equal(t, []string{"p1"}, conns, "not sent again: answered on path 1 once it was back")
		}
		mu.Unlock()
		setP1(t, m, true)
	}
}
