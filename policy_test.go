package intents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testPaths() []*Path {
	v4 := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	return []*Path{
		{Name: "eth0", Type: TypeWired, Up: true, Addrs: v4("10.0.0.2")},
		{Name: "wlan0", Type: TypeWifi, Up: true, Addrs: v4("192.168.1.5")},
		{Name: "wwan0", Type: TypeCellular, Up: true, Expensive: true, Addrs: v4("100.64.0.9")},
		{Name: "lo", Type: TypeLoopback, Up: true, Addrs: v4("127.0.0.1")},
		{Name: "eth1", Type: TypeWired, Up: false, Addrs: v4("10.1.0.2")},
		{Name: "v6only", Type: TypeOther, Up: true, Addrs: []netip.Addr{netip.MustParseAddr("2001:db8::2")}},
	}
}

func names(ps []*Path) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestPermit(t *testing.T) {
	for _, tc := range []struct {
		intents string
		family  byte
		want    []string
	}{
		{"", 0, []string{"eth0", "wlan0", "wwan0", "v6only"}},
		{"", 4, []string{"eth0", "wlan0", "wwan0"}},
		{"", 6, []string{"v6only"}},
		{"prefer=wifi", 4, []string{"wlan0", "eth0", "wwan0"}},
		{"avoid=wired,prefer=cellular", 4, []string{"wwan0", "wlan0", "eth0"}},
		{"prohibit=cellular", 4, []string{"eth0", "wlan0"}},
		{"prohibit=expensive", 4, []string{"eth0", "wlan0"}},
		{"cost=noexpense", 4, []string{"eth0", "wlan0"}},
		{"cost=optimize", 4, []string{"eth0", "wlan0", "wwan0"}},
		{"cost=optimize,prefer=wwan0", 4, []string{"eth0", "wlan0", "wwan0"}},
		{"require=wifi", 0, []string{"wlan0"}},
		{"require=wifi,require=wwan0", 0, []string{"wlan0", "wwan0"}},
		{"prohibit=wired,prefer=eth0", 4, []string{"eth0", "wlan0", "wwan0"}}, // the name wins over the type
		{"require=eth1", 0, nil},                                              // down
		{"prohibit=wlan0,prohibit=eth0,prohibit=cellular", 4, nil},
	} {
		in, err := ParseIntents(tc.intents)
		assert.NoError(t, err)
		got, excl := permit(&in, testPaths(), tc.family, false)
		assert.Equal(t, tc.want, names(got), "%q family %d", tc.intents, tc.family)
		assert.Len(t, excl, len(testPaths())-len(got), "%q: every path left out says why", tc.intents)
	}
}

func TestPermitReasons(t *testing.T) {
	in, _ := ParseIntents("prohibit=wifi,prohibit=expensive")
	_, excl := permit(&in, testPaths(), 4, false)
	assert.Equal(t, []Exclusion{
		{"wlan0", "prohibited (prohibit=wifi)"},
		{"wwan0", "expensive (prohibit=expensive or cost=noexpense)"},
		{"lo", "loopback cannot reach the destination"},
		{"eth1", "down"},
		{"v6only", "no usable IPv4 address"},
	}, excl)
	err := error(&NoPathError{Dest: "example.com:443", Excluded: excl[:2]})
	assert.True(t, errors.Is(err, ErrNoPath))
	assert.Equal(t, "intents: no permitted path to example.com:443: wlan0: prohibited (prohibit=wifi); "+
		"wwan0: expensive (prohibit=expensive or cost=noexpense)", err.Error())
}

func fmtAny(v any) string { return fmt.Sprint(v) }

func TestDecisionTraceAndLog(t *testing.T) {
	var buf strings.Builder
	m := loManager(t, PolicyFunc(func(req *Request, d *Decision) {
		d.Choices = append(d.Choices, Choice{Path: req.Paths[0]})
		d.Reason = "first permitted"
	}))
	m.cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	paths := []*Path{{Name: "eth0", Type: TypeWired, Up: true, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")},
		Prior: Estimate{RTT: 20 * time.Millisecond, Bandwidth: 5e6, Active: 2, Pending: 3000}}}
	m.paths.Store(&paths)
	var got []DecisionInfo
	ctx := WithDecisionTrace(context.Background(), func(di DecisionInfo) { got = append(got, di) })
	ctx = WithIntents(ctx, Intents{Category: CategoryQuery})
	_, err := m.plan(ctx, "tcp", "192.0.2.1", 80, false)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "first permitted", got[0].Reason)
	assert.Equal(t, CategoryQuery, got[0].Intents.Category)
	assert.Equal(t, "new on eth0", got[0].Choices[0].String())
	assert.Contains(t, buf.String(), `msg="intents decision" dest=192.0.2.1:80 intents="category=query"`)
	assert.Contains(t, buf.String(), `reason="first permitted"`)
	assert.Contains(t, buf.String(), `paths="eth0 rtt=20ms capacity=5.00Mbit/s active=2 pending=3000B"`, "what the policy weighed")
}
