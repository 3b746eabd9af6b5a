package proxy

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The proxy's own certificate is made once, kept private and reused;
// made anew for a host it does not name or when it nears its expiry, by
// the same authority, which a browser therefore trusts once.
func TestOwnCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "intents")
	own, err := LoadOwnCertificate(dir, []string{"127.0.0.1", "localhost"})
	require.NoError(t, err)
	assert.True(t, own.Made)
	if runtime.GOOS != "windows" {
		for name, perm := range map[string]os.FileMode{"": 0o700, ownCAKeyFile: 0o600, ownCertKeyFile: 0o600, ownCAFile: 0o644} {
			fi, err := os.Stat(filepath.Join(dir, name))
			require.NoError(t, err)
			assert.Equal(t, perm, fi.Mode().Perm(), "%q", name)
		}
	}
	caPEM, err := os.ReadFile(own.CAFile)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	for _, host := range []string{"127.0.0.1", "localhost"} {
		_, err := own.Certificate.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
		assert.NoError(t, err, "a client that trusts the authority trusts the certificate for %s", host)
	}

	again, err := LoadOwnCertificate(dir, []string{"localhost"})
	require.NoError(t, err)
	assert.False(t, again.Made, "reused")
	assert.Equal(t, own.SPKI, again.SPKI)

	other, err := LoadOwnCertificate(dir, []string{"localhost", "proxy.lan", "192.0.2.7"})
	require.NoError(t, err)
	assert.True(t, other.Made, "made anew for hosts it did not name")
	assert.NotEqual(t, own.SPKI, other.SPKI)
	_, err = other.Certificate.Leaf.Verify(x509.VerifyOptions{DNSName: "proxy.lan", Roots: roots})
	assert.NoError(t, err, "by the same authority")

	ca, err := tls.LoadX509KeyPair(own.CAFile, filepath.Join(dir, ownCAKeyFile))
	require.NoError(t, err)
	_, err = makeCert(dir, ca.Leaf, ca.PrivateKey.(*ecdsa.PrivateKey), []string{"localhost"}, 10*24*time.Hour)
	require.NoError(t, err)
	renewed, err := LoadOwnCertificate(dir, []string{"localhost"})
	require.NoError(t, err)
	assert.True(t, renewed.Made, "made anew 30 days before it expires")
	assert.Greater(t, time.Until(renewed.Certificate.Leaf.NotAfter), 80*24*time.Hour)
}
