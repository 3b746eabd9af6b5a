//go:build linux

package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" { // the client half, inside the namespace
		client()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSmoke loads a tiny page once per contender on the testbed and checks
// the output is complete and consistent. It asserts no speed-up.
func TestSmoke(t *testing.T) {
	testbed.RequireRoot(t)
	sc := scenarios["asymmetric"]
	tb := testbed.New(t, testbed.Spec{Paths: sc.paths, MPTCP: &testbed.MPTCPSpec{}})
	_, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	cfg := newConfig(sc, tb, 4, 10_000, 1)
	results, err := runClient(tb, cfg)
	require.NoError(t, err)
	seen := map[string]int{}
	ideal := idealPLT(sc, cfg)
	for _, r := range results {
		seen[r.Contender]++
		assert.EqualValues(t, cfg.RootSize+int64(cfg.Objects)*cfg.Size, r.Bytes, "%s received the whole page", r.Contender)
		assert.Greater(t, r.PLT, ideal, "%s: the lower bound is below every measured load", r.Contender)
		n := 0
		for _, c := range r.Paths {
			n += c
		}
		assert.Equal(t, cfg.Objects+1, n, "%s: every object's path is known", r.Contender)
	}
	assert.Len(t, seen, 7, "every contender measured")
	var out strings.Builder
	report(&out, sc, cfg, results)
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "EAF (intents, priors)")
}
