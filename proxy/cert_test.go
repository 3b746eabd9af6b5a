package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The proxy's own certificate is made once, kept private and reused;
// made anew for a host it does not name or when it nears its expiry,
// with the same key, so that the pin a browser was given holds.
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
	assert.Equal(t, own.SPKI, other.SPKI, "with the same key: the pin holds")
	caPEM, err = os.ReadFile(own.CAFile)
	require.NoError(t, err)
	roots = x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	for _, host := range []string{"proxy.lan", "localhost", "192.0.2.7"} {
		_, err = other.Certificate.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
		assert.NoError(t, err, "%s: by an authority that may sign for these", host)
	}
	assert.True(t, mayIssueFor(freshCA(t, other), []string{"127.0.0.1", "localhost"}), "and for the hosts before")

	ca, err := tls.LoadX509KeyPair(own.CAFile, filepath.Join(dir, ownCAKeyFile))
	require.NoError(t, err)
	_, err = makeCert(dir, ca.Leaf, ca.PrivateKey.(*ecdsa.PrivateKey), []string{"localhost"}, leafKey(dir), 10*24*time.Hour)
	require.NoError(t, err)
	renewed, err := LoadOwnCertificate(dir, []string{"localhost"})
	require.NoError(t, err)
	assert.True(t, renewed.Made, "made anew 30 days before it expires")
	assert.Greater(t, time.Until(renewed.Certificate.Leaf.NotAfter), 80*24*time.Hour)
	assert.Equal(t, own.SPKI, renewed.SPKI, "the pin holds across renewals")
}

// Whoever reads the authority's key can sign only for the listeners'
// own names and addresses: a certificate it signs for any other site is
// refused by a client that trusts it; and an authority of old, which
// could sign for anything, is replaced.
func TestOwnAuthorityIsConstrained(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "intents")
	own, err := LoadOwnCertificate(dir, []string{"127.0.0.1", "localhost"})
	require.NoError(t, err)
	pair, err := tls.LoadX509KeyPair(own.CAFile, filepath.Join(dir, ownCAKeyFile))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(pair.Leaf)
	elsewhere := t.TempDir()
	for _, site := range []string{"bank.example", "192.0.2.99", "localhost.bank.example"} {
		forged, err := makeCert(elsewhere, pair.Leaf, pair.PrivateKey.(*ecdsa.PrivateKey), []string{site}, leafKey(elsewhere), time.Hour)
		require.NoError(t, err)
		_, err = forged.Leaf.Verify(x509.VerifyOptions{DNSName: site, Roots: roots})
		var invalid x509.CertificateInvalidError
		require.ErrorAs(t, err, &invalid, "%s: a forged certificate is refused", site)
		assert.Equal(t, x509.CANotAuthorizedForThisName, invalid.Reason, site)
	}
	onlyIPs := t.TempDir()
	ipOwn, err := LoadOwnCertificate(onlyIPs, []string{"192.0.2.7"})
	require.NoError(t, err)
	ipCA, err := tls.LoadX509KeyPair(ipOwn.CAFile, filepath.Join(onlyIPs, ownCAKeyFile))
	require.NoError(t, err)
	assert.Equal(t, []string{noName}, ipCA.Leaf.PermittedDNSDomains, "no name at all for a listener known by its address alone")

	// An unconstrained authority in the directory: replaced.
	old := t.TempDir()
	ca, caKey := unconstrainedCA(t)
	require.NoError(t, writePEM(old, ownCAFile, ownCAKeyFile, ca.Raw, caKey))
	fresh, err := LoadOwnCertificate(old, []string{"localhost"})
	require.NoError(t, err)
	assert.NotEqual(t, ca.Raw, freshCA(t, fresh).Raw, "made anew")
	assert.True(t, freshCA(t, fresh).PermittedDNSDomainsCritical)
}

// A directory a symbolic link stands for is not the proxy's own: its
// keys could be another's.
func TestOwnCertificateDirectory(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "intents")
	require.NoError(t, os.Symlink(real, link))
	_, err := LoadOwnCertificate(link, []string{"localhost"})
	assert.ErrorContains(t, err, "symbolic link")
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = LoadOwnCertificate(file, []string{"localhost"})
	assert.ErrorContains(t, err, "not a directory")
}

func unconstrainedCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "old"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(ownCALifetime),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return ca, key
}

func freshCA(t *testing.T, own *OwnCertificate) *x509.Certificate {
	b, err := os.ReadFile(own.CAFile)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	ca, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return ca
}
