package intents_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

// TestNetnsConformance runs the conformance suite with its servers behind
// the testbed's two paths, so that the Manager's policy decides every
// request to them (on loopback the operating system routes them and no
// policy is asked).
func TestNetnsConformance(t *testing.T) {
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{{Veth: true}, {Veth: true}}})
	testbed.RunTest(t, tb.Client, "TestNetnsConformanceChild", tb.Server.Name+" "+tb.Hosts[0].String())
}

func TestNetnsConformanceChild(t *testing.T) {
	arg := testbed.ChildArg(t, "TestNetnsConformance")
	var server testbed.Netns
	var host string
	_, err := fmt.Sscan(arg, &server.Name, &host)
	require.NoError(t, err)
	scenarioListener = func(t *testing.T) net.Listener {
		var l net.Listener
		require.NoError(t, server.Do(func() (err error) {
			l, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
			return err
		}))
		return l
	}
	scenarioServerName, scenarioPolicyConns = "example.com", true
	defer func() { scenarioListener, scenarioServerName, scenarioPolicyConns = nil, "", false }()
	pol := &countingPolicy{EAF: &policy.EAF{}}
	runConformance(t, variants(t, pol))
	t.Logf("the policy decided %d times", pol.decided.Load())
	assert.Positive(t, pol.decided.Load(), "the policy decided")
}
