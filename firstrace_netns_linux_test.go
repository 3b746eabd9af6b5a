package intents_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

// TestNetnsFirstRace loads a first object through a fresh Manager with
// EAF over a near slow path (10 ms, 0.5 Mbit/s) and a far fast one
// (50 ms, 20 Mbit/s): its handshake answers first on the slow path. The
// object is asked for on both, arrives byte for byte, and the slow path,
// which lost the race on its rate, has shown a capacity below 2 Mbit/s
// before the next request is placed; that one, and any after, is not
// raced. With DisableFirstRace, a first object is asked for once.
func TestNetnsFirstRace(t *testing.T) {
	testbed.SkipIfShort(t, "3 s")
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{
		Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 0.5e6), testbed.Symmetric(50*time.Millisecond, 20e6)},
	})
	web, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsFirstRaceChild", "race")
	from := map[string][]string{}
	for _, r := range web.Requests() {
		from[r.URI] = append(from[r.URI], r.Remote.Addr().String())
	}
	assert.ElementsMatch(t, []string{"10.71.1.1", "10.71.2.1"}, from["/obj/10000"], "the first object on both paths")
	assert.Len(t, from["/obj/20000"], 1, "the next asked for once")
	assert.Len(t, from["/obj/10001"], 1, "a first object asked for once without the race")
}

func TestNetnsFirstRaceChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsFirstRace")
	fresh := func() (*intents.Manager, *intents.Transport) {
		m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
			Policy: &policy.EAF{}, NoWatch: true})
		require.NoError(t, err)
		return m, &intents.Transport{Manager: m}
	}
	m, tr := fresh()
	defer m.Close()
	defer tr.Close()
	ctx := context.Background()
	getObject(ctx, t, tr, objURL+"10000", 10000)
	e := m.Path("p1").Estimate()
	assert.False(t, e.BandwidthFloor, "the slow path's capacity shown by its loss")
	assert.Less(t, e.Bandwidth, int64(2e6), "and below 2 Mbit/s")
	getObject(ctx, t, tr, objURL+"20000", 20000)

	m2, tr2 := fresh()
	defer m2.Close()
	defer tr2.Close()
	tr2.DisableFirstRace = true
	getObject(ctx, t, tr2, objURL+"10001", 10001)
}
