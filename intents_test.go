package intents

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseIntents(t *testing.T) {
	in, err := ParseIntents("category=bulk, recv=10MB,send=2.5KiB,duration=1m30s,bitrate=5Mbps,burstiness=random," +
		"timeliness=interactive,resilience=sensitive,cost=optimize,multipath=aggregate," +
		"prefer=wifi,prohibit=cellular,avoid=eth1,require=if:wired,prohibit=expensive,prohibit=constrained")
	require.NoError(t, err)
	assert.Equal(t, Intents{
		Category: CategoryBulk, SizeToBeReceived: 10_000_000, SizeToBeSent: 2560,
		Duration: 90 * time.Second, Bitrate: 5_000_000, Burstiness: BurstinessRandom,
		Timeliness: TimelinessInteractive, Resilience: ResilienceSensitive, Cost: CostOptimize,
		Multipath:         MultipathAggregate,
		Types:             map[InterfaceType]Level{TypeWifi: LevelPrefer, TypeCellular: LevelProhibit},
		Interfaces:        map[string]Level{"eth1": LevelAvoid, "wired": LevelRequire},
		ProhibitExpensive: true, ProhibitConstrained: true,
	}, in)
}

func TestParseIntentsErrorsNameTheCulprit(t *testing.T) {
	for text, want := range map[string]string{
		"colour=blue":         `unknown key "colour"`,
		"category=huge":       `bad value "huge" for category`,
		"recv=-5":             `bad value "-5" for recv`,
		"recv=1.5B":           `bad value "1.5B" for recv`,
		"recv=99999999999TB":  `bad value "99999999999TB" for recv`,
		"bitrate=fast":        `bad value "fast" for bitrate`,
		"duration=-1s":        `bad value "-1s" for duration`,
		"prefer=":             `bad value "" for prefer`,
		"category":            `"category" is not key=value`,
		"multipath=sometimes": `bad value "sometimes" for multipath`,
		"prefer=if:%zz":       `bad value "if:%zz" for prefer`,
	} {
		_, err := ParseIntents(text)
		if assert.Error(t, err, text) {
			assert.Contains(t, err.Error(), want, text)
		}
	}
}

func TestIntentsStringRoundTrip(t *testing.T) {
	for _, in := range []Intents{
		{},
		{Category: CategoryQuery, SizeToBeReceived: 1 << 20, Bitrate: 1500},
		{SizeToBeSent: 1234567, Duration: time.Millisecond + time.Nanosecond, Cost: CostNoExpense},
		{Interfaces: map[string]Level{"wifi": LevelPrefer, "a,b": LevelAvoid, "if:x": LevelNone, "eth0": LevelRequire}},
		{Types: map[InterfaceType]Level{TypeLoopback: LevelProhibit, TypeOther: LevelNone}, ProhibitExpensive: true},
	} {
		text := in.String()
		back, err := ParseIntents(text)
		require.NoError(t, err, text)
		assert.Equal(t, in, back, text)
	}
	assert.Equal(t, "category=bulk,recv=10MB,prefer=wifi,prohibit=cellular",
		Intents{Category: CategoryBulk, SizeToBeReceived: 10e6,
			Types: map[InterfaceType]Level{TypeWifi: LevelPrefer, TypeCellular: LevelProhibit}}.String())
}

func FuzzParseIntents(f *testing.F) {
	for _, s := range []string{
		"", "category=bulk,recv=10MB,prefer=wifi,prohibit=cellular", "recv=1.5KiB,send=3GB",
		"bitrate=2.5Mbps,duration=1h2m3.5s", "prefer=if:a%2Cb,avoid=if:wifi", "prohibit=expensive,cost=noexpense",
		"require=eth0,none=wwan0,multipath=handover,timeliness=background,resilience=resilient,burstiness=bulk",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseIntents(s)
		if err != nil {
			return
		}
		text := in.String()
		back, err := ParseIntents(text)
		if err != nil {
			t.Fatalf("ParseIntents(%q) = %v; its String %q does not parse: %v", s, in, text, err)
		}
		if !reflect.DeepEqual(in, back) {
			t.Fatalf("round trip of %q via %q: %#v != %#v", s, text, in, back)
		}
	})
}

func TestWithIntentsMergesFieldByField(t *testing.T) {
	ctx := WithIntents(context.Background(), Intents{
		Category: CategoryBulk, SizeToBeReceived: 100, ProhibitExpensive: true,
		Types: map[InterfaceType]Level{TypeWifi: LevelPrefer, TypeCellular: LevelAvoid},
	})
	ctx = WithIntents(ctx, Intents{
		SizeToBeReceived: 5000, Timeliness: TimelinessInteractive,
		Types: map[InterfaceType]Level{TypeCellular: LevelNone, TypeWired: LevelRequire},
	})
	got, ok := FromContext(ctx)
	require.True(t, ok)
	assert.Equal(t, Intents{
		Category: CategoryBulk, SizeToBeReceived: 5000, Timeliness: TimelinessInteractive,
		ProhibitExpensive: true, // a refinement cannot lift a prohibition
		Types:             map[InterfaceType]Level{TypeWifi: LevelPrefer, TypeCellular: LevelNone, TypeWired: LevelRequire},
	}, got)

	_, ok = FromContext(context.Background())
	assert.False(t, ok)
}

func TestWithIntentsCopiesMaps(t *testing.T) {
	prefs := map[string]Level{"eth0": LevelPrefer}
	ctx := WithIntents(context.Background(), Intents{Interfaces: prefs})
	prefs["eth0"] = LevelProhibit
	got, _ := FromContext(ctx)
	assert.Equal(t, LevelPrefer, got.Interfaces["eth0"])
}
