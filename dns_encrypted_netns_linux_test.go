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

// TestNetnsEncryptedDNS resolves through an encrypted DNS server per path,
// each with its own zone (DNS over TLS on path 1, over HTTPS on path 2):
// every query arrives encrypted on its own path, on one connection per
// path, and none in plaintext; a server whose certificate does not show
// the configured name is not used, and its path's plaintext server is not
// asked instead.
func TestNetnsEncryptedDNS(t *testing.T) {
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{Servers: 2, Paths: []testbed.PathSpec{
		testbed.Symmetric(10*time.Millisecond, 10e6), testbed.Symmetric(20*time.Millisecond, 10e6)}})
	servers, err := tb.StartDNS()
	require.NoError(t, err)
	ca, err := testbed.NewCA()
	require.NoError(t, err)
	require.NoError(t, tb.StartDNSOverTLS(servers, ca))
	require.NoError(t, tb.StartDNSOverHTTPS(servers, ca))
	pem, err := ca.WritePEM(t.TempDir())
	require.NoError(t, err)

	testbed.RunTest(t, tb.Client, "TestNetnsEncryptedDNSChild", "per-path "+pem)
	for i, s := range servers {
		t.Logf("path %d: %d queries, %d over TLS on %d connections, %d over HTTPS on %d", i+1, s.Queries(),
			s.TLSQueries(), s.TLSConns(), s.HTTPSQueries(), s.HTTPSConns())
		encrypted, conns := s.TLSQueries(), s.TLSConns()
		if i == 1 {
			encrypted, conns = s.HTTPSQueries(), s.HTTPSConns()
		}
		assert.Positive(t, encrypted, "path %d's server asked encrypted", i+1)
		assert.Equal(t, s.Queries(), s.TLSQueries()+s.HTTPSQueries(), "path %d: none in plaintext", i+1)
		assert.EqualValues(t, 1, conns, "path %d: one connection for all its queries", i+1)
	}

	before := []int64{servers[0].Queries(), servers[1].Queries()}
	testbed.RunTest(t, tb.Client, "TestNetnsEncryptedDNSChild", "wrong-name "+pem)
	assert.Equal(t, before, []int64{servers[0].Queries(), servers[1].Queries()}, "nothing asked in plaintext, nor answered encrypted")
}

func TestNetnsEncryptedDNSChild(t *testing.T) {
	scenario, pem, _ := strings.Cut(testbed.ChildArg(t, "TestNetnsEncryptedDNS"), " ")
	roots, err := testbed.ReadPool(pem)
	require.NoError(t, err)
	name := "dns.test"
	if scenario == "wrong-name" {
		name = "other.example" // the certificate shows *.test
	}
	m, err := intents.NewManager(intents.Config{NoWatch: true, DNSTLSConfig: &tls.Config{RootCAs: roots},
		Paths: []intents.PathConfig{
			{Interface: "p1", DNS: []string{"10.71.1.2"}, DNSOverTLS: []string{"10.71.1.2#" + name}},
			{Interface: "p2", DNS: []string{"10.71.2.2"}, DNSOverHTTPS: []string{"https://" + name + "/dns-query#10.71.2.2"}},
		}})
	require.NoError(t, err)
	defer m.Close()
	r := m.Resolver()
	ctx := context.Background()
	if scenario == "wrong-name" {
		for _, p := range []string{"p1", "p2"} {
			_, err := r.LookupPath(ctx, m.Path(p), "ip4", "www.test")
			require.Error(t, err, p)
			assert.Contains(t, err.Error(), "certificate", "%s: the TLS handshake failed", p)
			assert.Contains(t, err.Error(), "not asked in plaintext", p)
		}
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
