package intents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/estimate"
)

// knowledgeManager is a Manager over loopback that keeps its knowledge in
// file, logging to log.
func knowledgeManager(t *testing.T, file string, log *bytes.Buffer, dns ...string) *Manager {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: "lo", DNS: dns}}, NoWatch: true, ResolvConf: empty, Knowledge: file,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	require.NoError(t, err)
	return m
}

// What a Manager measured is there for the next one on the same network,
// as remembered, from a file only its owner reads; a Manager on another
// network (other DNS servers) starts cold.
func TestKnowledgeOutlivesTheManager(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cache", "paths.json")
	var log bytes.Buffer
	m := knowledgeManager(t, file, &log)
	cold := m.Path("lo").Estimate()
	assert.False(t, cold.Remembered, "nothing saved yet")
	assert.Zero(t, cold.RTT)
	est := m.Path("lo").est
	est.AddRTT(30 * time.Millisecond)
	est.AddTransfer(100_000, 0, 400*time.Millisecond) // held back by the path: 2 Mbit/s shown
	require.NoError(t, m.Close())
	fi, err := os.Stat(file)
	require.NoError(t, err, "saved on Close")
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	m2 := knowledgeManager(t, file, &log)
	defer m2.Close()
	e := m2.Path("lo").Estimate()
	assert.True(t, e.Remembered)
	assert.Equal(t, 30*time.Millisecond, e.RTT)
	assert.InDelta(t, 2e6, float64(e.Bandwidth), 1)
	assert.False(t, e.BandwidthFloor, "a capacity an earlier Manager saw shown")
	assert.False(t, e.Measured, "not measured by this Manager")
	assert.Less(t, e.Age, time.Minute)

	m3 := knowledgeManager(t, file, &log, "192.0.2.53")
	defer m3.Close()
	assert.False(t, m3.Path("lo").Estimate().Remembered, "another network: other DNS servers")
	assert.Empty(t, log.String(), "nothing to warn of")
}

// A file that is not ours, or not whole, or says what no path measures, is
// no knowledge: one warning, no crash, and never a wrong value.
func TestKnowledgeIgnoresBadFiles(t *testing.T) {
	id := strings.Repeat("ab", 32)
	now := time.Now()
	good := savedNetwork{RTT: 20 * time.Millisecond, MinRTT: 15 * time.Millisecond, Samples: 3, RTTAt: now}
	file := func(v any) []byte {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name    string
		content []byte
		warns   bool
	}{
		{"not JSON", []byte("\x00\x01garbage"), true},
		{"cut short", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: good}})[:40], true},
		{"another version", file(knowledgeFile{Version: 99, Networks: map[string]savedNetwork{id: good}}), true},
		{"too large", append([]byte(`{"version":1,"networks":{},"pad":"`), bytes.Repeat([]byte("x"), knowledgeMaxBytes)...), true},
		{"negative RTT", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: {RTT: -time.Second, MinRTT: time.Millisecond, Samples: 1, RTTAt: now}}}), false},
		{"an hour's RTT", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: {RTT: time.Hour, MinRTT: time.Hour, Samples: 1, RTTAt: now}}}), false},
		{"a capacity beyond any link", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: {Capacity: 1e15, CapacityAt: now}}}), false},
		{"loss over one", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: {Capacity: 1e6, CapacityAt: now, Loss: 3}}}), false},
		{"from the future", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: {Capacity: 1e6, CapacityAt: now.Add(time.Hour)}}}), false},
		{"older than a day", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: {Capacity: 1e6, CapacityAt: now.Add(-knowledgeMaxAge - time.Minute)}}}), false},
		{"no samples behind the RTT", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{id: {RTT: time.Millisecond, MinRTT: time.Millisecond, RTTAt: now}}}), false},
		{"a short id", file(knowledgeFile{Version: 1, Networks: map[string]savedNetwork{"ab": good}}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "paths.json")
			require.NoError(t, os.WriteFile(name, c.content, 0o600))
			var log bytes.Buffer
			k := loadKnowledge(name, slog.New(slog.NewTextHandler(&log, nil)))
			assert.Empty(t, k.networks, "nothing believed")
			if c.warns {
				assert.Equal(t, 1, strings.Count(log.String(), "\n"), "one line: %s", log.String())
				assert.Contains(t, log.String(), "ignoring")
			} else {
				assert.Empty(t, log.String(), "values out of bounds are dropped quietly")
			}
			// The next save replaces what could not be read.
			require.NoError(t, k.save([]learnt{{id, estimate.Remembered{RTT: time.Millisecond, MinRTT: time.Millisecond, Samples: 1, RTTAt: now}}}))
			assert.Len(t, loadKnowledge(name, slog.New(slog.NewTextHandler(&log, nil))).networks, 1)
		})
	}
	// An unreadable file (a folder in its place) warns too.
	var log bytes.Buffer
	assert.Empty(t, loadKnowledge(t.TempDir(), slog.New(slog.NewTextHandler(&log, nil))).networks)
	assert.Contains(t, log.String(), "ignoring")
}

// Saving merges with what another process saved meanwhile, keeps a part
// not learnt anew, ages out what is over a day old, and keeps the file
// to its bound, the most recently learnt networks first.
func TestKnowledgeSaveMergesAndBounds(t *testing.T) {
	name := filepath.Join(t.TempDir(), "paths.json")
	now := time.Now()
	quiet := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	a, b := strings.Repeat("aa", 32), strings.Repeat("bb", 32)
	k1 := loadKnowledge(name, quiet)
	k2 := loadKnowledge(name, quiet)
	require.NoError(t, k1.save([]learnt{{a, estimate.Remembered{RTT: 10 * time.Millisecond, MinRTT: 9 * time.Millisecond, Samples: 4, RTTAt: now,
		Capacity: 5e6, CapacityAt: now}}}))
	require.NoError(t, k2.save([]learnt{{b, estimate.Remembered{RTT: 50 * time.Millisecond, MinRTT: 40 * time.Millisecond, Samples: 2, RTTAt: now}}}))
	got := loadKnowledge(name, quiet)
	assert.Len(t, got.networks, 2, "the other process's network kept")

	// RTTs learnt anew, no capacity shown this time: the old one stays.
	require.NoError(t, k1.save([]learnt{{a, estimate.Remembered{RTT: 12 * time.Millisecond, MinRTT: 9 * time.Millisecond, Samples: 9, RTTAt: now}}}))
	r, ok := loadKnowledge(name, quiet).lookup(a)
	require.True(t, ok)
	assert.Equal(t, 12*time.Millisecond, r.RTT)
	assert.Equal(t, 5e6, r.Capacity)

	// Beyond the bound, the least recently learnt go.
	var ls []learnt
	for i := range knowledgeMaxNetworks + 10 {
		id := fmt.Sprintf("%064x", i+1)
		ls = append(ls, learnt{id, estimate.Remembered{RTT: time.Millisecond, MinRTT: time.Millisecond, Samples: 1,
			RTTAt: now.Add(-time.Duration(knowledgeMaxNetworks+10-i) * time.Second)}})
	}
	require.NoError(t, k1.save(ls))
	kept := loadKnowledge(name, quiet).networks
	assert.Len(t, kept, knowledgeMaxNetworks)
	assert.Contains(t, kept, a, "learnt now")
	assert.NotContains(t, kept, fmt.Sprintf("%064x", 1), "the oldest gone")

	// A day later, nothing is left.
	later := loadKnowledge(name, quiet)
	later.now = func() time.Time { return now.Add(knowledgeMaxAge + time.Hour) }
	nets, err := later.read()
	require.NoError(t, err)
	assert.Empty(t, nets)
}

// A remembered capacity stands only until this process shows the path's
// own, even when that is lower: the network may have slowed since.
func TestRememberedCapacityGivesWayToAMeasurement(t *testing.T) {
	p := &Path{Name: "p", Up: true, est: estimate.New(0, 0)}
	p.est.Remember(estimate.Remembered{Capacity: 50e6, CapacityAt: time.Now()})
	assert.EqualValues(t, 50e6, p.Estimate().Bandwidth)
	p.est.AddRTT(20 * time.Millisecond)
	p.est.AddTransfer(100_000, 0, 400*time.Millisecond)
	e := p.Estimate()
	assert.InDelta(t, 2e6, float64(e.Bandwidth), 1)
	assert.False(t, e.Remembered)
	assert.Zero(t, e.Age, "nothing stands on the old knowledge")
}
