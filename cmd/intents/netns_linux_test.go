package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsCLI runs paths and get inside the client namespace of the
// emulated testbed (10 Mbit/s / 20 ms and 5 Mbit/s / 60 ms).
func TestNetnsCLI(t *testing.T) {
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{
		Paths: []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 10e6), testbed.Symmetric(60*time.Millisecond, 5e6)},
	})
	_, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsCLIChild", "cli")
}

func TestNetnsCLIChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsCLI")
	mf := func(cfg intents.Config) (*intents.Manager, error) {
		cfg.Paths, cfg.NoWatch = []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}, true
		return intents.NewManager(cfg)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"paths", "-json", "-probe", "10.71.100.1:80"}, &stdout, &stderr, mf)
	require.Equal(t, 0, code, stderr.String())
	var paths []pathJSON
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &paths))
	require.Len(t, paths, 2)
	t.Logf("probed: %s %.1f ms, %s %.1f ms", paths[0].Name, paths[0].Estimate.RTTMillis, paths[1].Name, paths[1].Estimate.RTTMillis)
	assert.Equal(t, []string{"10.71.1.1"}, paths[0].Addresses)
	assert.True(t, paths[0].Estimate.Measured)
	assert.InDelta(t, 20, paths[0].Estimate.RTTMillis, 10, "path 1's RTT, measured")
	assert.InDelta(t, 60, paths[1].Estimate.RTTMillis, 15, "path 2's RTT, measured")

	const size = 6_000_000
	file := filepath.Join(t.TempDir(), "obj")
	stdout.Reset()
	code = run(context.Background(), []string{"get", "-aggregate", "-json", "-o", file, "http://10.71.100.1/obj/6000000"}, &stdout, &stderr, mf)
	require.Equal(t, 0, code, stderr.String())
	var sum getSummary
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum))
	t.Logf("get -aggregate: %d bytes in %.2f s, per path %+v", sum.Bytes, sum.Seconds, sum.Paths)
	body, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(body), "the object, byte for byte")
	assert.Greater(t, sum.Paths["p1"].Bytes, int64(0))
	assert.Greater(t, sum.Paths["p2"].Bytes, int64(0), "both paths carried ranges")
}
