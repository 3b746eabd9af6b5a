package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharedTraces is where the project's cellular traces live beside a
// checkout.
const sharedTraces = "../../../shared/traces"

func parse(t *testing.T, lines ...string) *Trace {
	t.Helper()
	tr, err := ParseTrace("test", strings.NewReader(strings.Join(lines, "\n")+"\n"))
	require.NoError(t, err)
	return tr
}

func TestParseTraceRejects(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"empty", "", "no delivery opportunities"},
		{"blank lines only", "\n\n", "no delivery opportunities"},
		{"no time", "0\n0\n", "lasts no time"},
		{"not a number", "1\n2\nx\n", `line 3: "x" is not a time`},
		{"negative", "-1\n", `"-1" is not a time`},
		{"fraction", "1.5\n", `"1.5" is not a time`},
		{"overflow", "99999999999999999999\n", "is not a time"},
		{"going back", "1\n5\n3\n", "line 3: 3 ms comes before the line above it (5 ms)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseTrace("bad", strings.NewReader(c.text))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "trace bad")
		})
	}
}

func TestTraceRates(t *testing.T) {
	// "1": one opportunity a millisecond, 12 Mbit/s (the traces' README).
	one := parse(t, "1")
	assert.Equal(t, time.Millisecond, one.Period)
	assert.Equal(t, int64(12e6), one.MeanRate())
	assert.InDelta(t, 12e6, one.Rate(3*time.Millisecond, 1003*time.Millisecond), 1)

	// Two opportunities at 1 ms, none at 2, one at 3 and 4: 4 in 4 ms.
	tr := parse(t, "1", "1", "3", "4")
	assert.Equal(t, int64(12e6), tr.MeanRate())
	assert.InDelta(t, 24e6, tr.Rate(time.Millisecond, 2*time.Millisecond), 1, "both opportunities of 1 ms")
	assert.Zero(t, tr.Rate(2*time.Millisecond, 3*time.Millisecond), "none at 2 ms")
	assert.InDelta(t, 12e6, tr.Rate(5*time.Millisecond, 9*time.Millisecond), 1, "the next period: 5 to 8 ms")
	assert.Zero(t, tr.Rate(time.Second, time.Second))
}

func TestSharedTracesMeanRates(t *testing.T) {
	if _, err := os.Stat(sharedTraces); err != nil {
		t.Skipf("the project's traces are not beside this checkout (%v)", err)
	}
	// The means the traces' README gives, in Mbit/s to one decimal.
	for name, mbps := range map[string]float64{
		"Verizon-LTE-short.down":    5.0,
		"Verizon-LTE-short.up":      5.9,
		"TMobile-LTE-short.down":    16.7,
		"TMobile-LTE-short.up":      13.3,
		"Verizon-EVDO-driving.down": 0.5,
		"Verizon-EVDO-driving.up":   0.8,
	} {
		tr, err := ReadTrace(filepath.Join(sharedTraces, name))
		require.NoError(t, err)
		assert.Equal(t, strings.TrimSuffix(name, filepath.Ext(name)), tr.Name)
		assert.InDelta(t, mbps, float64(tr.MeanRate())/1e6, 0.05, name)
	}
}

func TestTraceCursor(t *testing.T) {
	tr := parse(t, "1", "1", "3", "4") // period 4 ms: opportunities at 1, 1, 3, 4, 5, 5, 7, 8, ...
	c := traceCursor{t: tr}
	c.seek(0)
	assert.Equal(t, int64(1), c.send(40, 0), "the first opportunity")
	assert.Equal(t, int64(1), c.send(40, 0), "small packets share it")
	assert.Equal(t, int64(1), c.send(1420, 0), "its last bytes")
	assert.Equal(t, int64(1), c.send(1500, 0), "the second at 1 ms")
	assert.Equal(t, int64(3), c.send(40, 2), "the queue emptied at 1 ms: the next opportunity")
	assert.Equal(t, int64(3), c.send(1000, 2), "3 ms's rest, with a packet queued before")
	assert.Equal(t, int64(4), c.send(1000, 2), "spanning 3 ms's last bytes and 4 ms's")
	assert.Equal(t, int64(5), c.send(1500, 5), "the rest of 4 ms's is lost: the next period's first")
	assert.Equal(t, int64(7), c.send(100, 7), "the second at 5 ms passed unused")

	c.seek(4)
	assert.Equal(t, int64(4), c.send(1500, 4), "an opportunity at a period's end, at the arrival's millisecond")
	assert.Equal(t, int64(5), c.send(1500, 4))
	c.seek(8)
	assert.Equal(t, int64(8), c.send(1500, 8))
	assert.Equal(t, int64(4_000_000_000), c.send(1, 4_000_000_000), "far on: the schedule wraps to a period's end")
	assert.Equal(t, int64(4_000_000_003), c.send(1, 4_000_000_002))

	// Every opportunity once, in order, across a wrap.
	c.seek(0)
	var got []int64
	for range 9 {
		got = append(got, c.send(TraceMTU, 0))
	}
	assert.Equal(t, []int64{1, 1, 3, 4, 5, 5, 7, 8, 9}, got)
}
