package intents_test

import (
	"context"
	"crypto/tls"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsDNSOverTLS resolves through a DNS-over-TLS server per path,
// each with its own zone: every query arrives over TLS on its own path,
// on one connection per path, and none in plaintext; a server whose
// certificate does not show the configured name is not used, and its
// path's plaintext server is not asked instead.
func TestNetnsDNSOverTLS(t *testing.T) {
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{Servers: 2, Paths: []testbed.PathSpec{
		testbed.Symmetric(10*time.Millisecond, 10e6), testbed.Symmetric(20*time.Millisecond, 10e6)}})
	servers, err := tb.StartDNS()
	require.NoError(t, err)
	ca, err := testbed.NewCA()
	require.NoError(t, err)
	require.NoError(t, tb.StartDNSOverTLS(servers, ca))
	pem, err := ca.WritePEM(t.TempDir())
	require.NoError(t, err)

	testbed.RunTest(t, tb.Client, "TestNetnsDNSOverTLSChild", "per-path "+pem)
	for i, s := range servers {
		t.Logf("path %d: %d queries, %d over TLS on %d connections", i+1, s.Queries(), s.TLSQueries(), s.TLSConns())
		assert.Positive(t, s.TLSQueries(), "path %d's server asked over TLS", i+1)
		assert.Equal(t, s.Queries(), s.TLSQueries(), "path %d: none in plaintext", i+1)
		assert.EqualValues(t, 1, s.TLSConns(), "path %d: one connection for all its queries", i+1)
	}

	before := servers[0].Queries()
	testbed.RunTest(t, tb.Client, "TestNetnsDNSOverTLSChild", "wrong-name "+pem)
	assert.Equal(t, before, servers[0].Queries(), "nothing asked in plaintext, nor answered over TLS")
}

func TestNetnsDNSOverTLSChild(t *testing.T) {
	scenario, pem, _ := strings.Cut(testbed.ChildArg(t, "TestNetnsDNSOverTLS"), " ")
	roots, err := testbed.ReadPool(pem)
	require.NoError(t, err)
	name := "dns.test"
	if scenario == "wrong-name" {
		name = "other.example" // the certificate shows *.test
	}
	m, err := intents.NewManager(intents.Config{NoWatch: true, DNSOverTLSConfig: &tls.Config{RootCAs: roots},
		Paths: []intents.PathConfig{
			{Interface: "p1", DNS: []string{"10.71.1.2"}, DNSOverTLS: []string{"10.71.1.2#" + name}},
			{Interface: "p2", DNS: []string{"10.71.2.2"}, DNSOverTLS: []string{"10.71.2.2:853#" + name}},
		}})
	require.NoError(t, err)
	defer m.Close()
	r := m.Resolver()
	ctx := context.Background()
	if scenario == "wrong-name" {
		_, err := r.LookupPath(ctx, m.Path("p1"), "ip4", "www.test")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "certificate", "the TLS handshake failed")
		assert.Contains(t, err.Error(), "not asked in plaintext")
		return
	}
	for _, c := range []struct {
		path, host string
		want       netip.Addr
	}{
		{"p1", "www.test", netip.MustParseAddr("10.71.100.1")},
		{"p2", "www.test", netip.MustParseAddr("10.71.100.2")}, // each path's own zone
		{"p1", "whoami.test", netip.MustParseAddr("10.71.1.2")},
		{"p2", "whoami.test", netip.MustParseAddr("10.71.2.2")},
	} {
		addrs, err := r.LookupPath(ctx, m.Path(c.path), "ip4", c.host)
		require.NoError(t, err, "%s on %s", c.host, c.path)
		assert.Equal(t, []netip.Addr{c.want}, addrs, "%s on %s", c.host, c.path)
	}
}
