package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// An OwnCertificate is what an HTTPS listener needs when nobody gave it
// a certificate: one issued by an authority of the proxy's own, both
// kept in a directory and reused, so that a browser told once to trust
// them keeps trusting them.
type OwnCertificate struct {
	// Certificate is the listeners' certificate and key.
	Certificate tls.Certificate
	// CAFile is the authority's certificate (PEM), for a browser that
	// trusts authorities it is given (Firefox: Settings, Certificates,
	// Import).
	CAFile string
	// SPKI is the SHA-256 of the certificate's public key, in base64, as
	// Chromium's --ignore-certificate-errors-spki-list takes it.
	SPKI string
	// Made reports whether the certificate was made (first use, expiry
	// near, a host it did not name) rather than read.
	Made bool
}

// Lifetimes of the proxy's own certificates: a browser trusts the
// authority once; the certificate it issues is made anew well before it
// expires.
const (
	ownCALifetime   = 10 * 365 * 24 * time.Hour
	ownCertLifetime = 90 * 24 * time.Hour
	ownCertRenew    = 30 * 24 * time.Hour
)

// Files of the proxy's own certificates in their directory.
const (
	ownCAFile      = "proxy-ca.pem"
	ownCAKeyFile   = "proxy-ca-key.pem"
	ownCertFile    = "proxy-cert.pem"
	ownCertKeyFile = "proxy-key.pem"
)

// LoadOwnCertificate returns the proxy's own certificate for hosts (the
// names and addresses its listeners are reached at), kept in dir: read
// if it is there, names them all and has more than 30 days to run, else
// made (and the authority too, on first use). The directory is made
// private to its user and the keys are readable by their owner alone.
func LoadOwnCertificate(dir string, hosts []string) (*OwnCertificate, error) {
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	ca, caKey, err := loadOrMakeCA(dir, hosts)
	if err != nil {
		return nil, err
	}
	own := &OwnCertificate{CAFile: filepath.Join(dir, ownCAFile)}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, ownCertFile), filepath.Join(dir, ownCertKeyFile))
	if err != nil || !usable(cert, ca, hosts) {
		if cert, err = makeCert(dir, ca, caKey, hosts, leafKey(dir), ownCertLifetime); err != nil {
			return nil, err
		}
		own.Made = true
	}
	own.Certificate = cert
	sum := sha256.Sum256(cert.Leaf.RawSubjectPublicKeyInfo)
	own.SPKI = base64.StdEncoding.EncodeToString(sum[:])
	return own, nil
}

// usable reports whether cert was issued by ca, names every host and
// has more than ownCertRenew to run.
func usable(cert tls.Certificate, ca *x509.Certificate, hosts []string) bool {
	leaf := cert.Leaf
	if leaf == nil || time.Until(leaf.NotAfter) < ownCertRenew || leaf.CheckSignatureFrom(ca) != nil {
		return false
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// privateDir makes dir, private to its user, if it is not there, and
// refuses one that a symbolic link stands for or that another user owns:
// whoever controls the directory controls the keys of an authority the
// user's browser trusts.
func privateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err = os.MkdirAll(dir, 0o700); err == nil {
			fi, err = os.Lstat(dir)
		}
	}
	switch {
	case err != nil:
		return err
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("proxy: %s is a symbolic link, not a directory of the proxy's own", dir)
	case !fi.IsDir():
		return fmt.Errorf("proxy: %s is not a directory", dir)
	case !ownedByMe(fi):
		return fmt.Errorf("proxy: %s belongs to another user", dir)
	}
	return nil
}

// loadOrMakeCA reads the authority in dir, or makes it if it is not
// there, expires within ownCertLifetime, or may not sign for every one
// of hosts (see constraintsFor): one made anew may sign for those it
// could and for hosts.
func loadOrMakeCA(dir string, hosts []string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	var permitted []string
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ownCAFile), filepath.Join(dir, ownCAKeyFile))
	if err == nil {
		key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
		if ok && pair.Leaf.IsCA && time.Until(pair.Leaf.NotAfter) > ownCertLifetime && mayIssueFor(pair.Leaf, hosts) {
			return pair.Leaf, key, nil
		}
		if ok && pair.Leaf.PermittedDNSDomainsCritical {
			permitted = permittedHosts(pair.Leaf)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("proxy: the authority in %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "intents proxy CA " + host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(ownCALifetime),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign,
	}
	tmpl.PermittedDNSDomains, tmpl.PermittedIPRanges = constraintsFor(append(permitted, hosts...))
	tmpl.PermittedDNSDomainsCritical = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(dir, ownCAFile, ownCAKeyFile, der, key); err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

// noName and noAddress are what an authority may sign for where it
// signs for no name, or no address: a name under .invalid (RFC 6761),
// which names nothing, and the unspecified addresses, which are no
// server's. Without them an empty list would permit any.
const noName = "invalid"

var noAddress = []*net.IPNet{
	{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(32, 32)},
	{IP: net.IPv6unspecified, Mask: net.CIDRMask(128, 128)},
}

// constraintsFor are an authority's name constraints (RFC 5280 §4.2.1.10)
// that let it sign for hosts alone: each name (and the names under it)
// and each address; whoever reads its key can impersonate those, never
// another site, to a browser that trusts it.
func constraintsFor(hosts []string) (names []string, addrs []*net.IPNet) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			bits := 8 * len(ip.To16())
			if ip4 := ip.To4(); ip4 != nil {
				ip, bits = ip4, 32
			}
			n := &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}
			if !slices.ContainsFunc(addrs, func(a *net.IPNet) bool { return a.String() == n.String() }) {
				addrs = append(addrs, n)
			}
		} else if h = strings.ToLower(strings.TrimSuffix(h, ".")); h != "" && !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	if len(names) == 0 {
		names = []string{noName}
	}
	if len(addrs) == 0 {
		addrs = noAddress
	}
	return names, addrs
}

// permittedHosts are the names and addresses ca's constraints permit,
// less those that stand for none.
func permittedHosts(ca *x509.Certificate) []string {
	var hosts []string
	for _, n := range ca.PermittedDNSDomains {
		if n != noName {
			hosts = append(hosts, n)
		}
	}
	for _, a := range ca.PermittedIPRanges {
		if !a.IP.IsUnspecified() {
			hosts = append(hosts, a.IP.String())
		}
	}
	return hosts
}

// mayIssueFor reports whether ca is constrained to names and addresses
// (see constraintsFor) among which every one of hosts is.
func mayIssueFor(ca *x509.Certificate, hosts []string) bool {
	if !ca.PermittedDNSDomainsCritical {
		return false // an authority of old, which could sign for anything
	}
	for _, h := range hosts {
		ok := false
		if ip := net.ParseIP(h); ip != nil {
			ok = slices.ContainsFunc(ca.PermittedIPRanges, func(n *net.IPNet) bool { return n.Contains(ip) })
		} else {
			h = strings.ToLower(strings.TrimSuffix(h, "."))
			ok = slices.ContainsFunc(ca.PermittedDNSDomains, func(d string) bool { return h == d || strings.HasSuffix(h, "."+d) })
		}
		if !ok {
			return false
		}
	}
	return true
}

// leafKey is the key of the listeners' certificate in dir, if there is
// one: a certificate made anew keeps it, so that the pin a browser was
// told (OwnCertificate.SPKI) holds across renewals; else a new key.
func leafKey(dir string) *ecdsa.PrivateKey {
	if b, err := os.ReadFile(filepath.Join(dir, ownCertKeyFile)); err == nil {
		if block, _ := pem.Decode(b); block != nil && block.Type == "EC PRIVATE KEY" {
			if key, err := x509.ParseECPrivateKey(block.Bytes); err == nil && key.Curve == elliptic.P256() {
				return key
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return key
}

// makeCert issues the listeners' certificate for hosts with key, valid
// for lifetime, and keeps it in dir.
func makeCert(dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, key *ecdsa.PrivateKey, lifetime time.Duration) (tls.Certificate, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "intents proxy"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writePEM(dir, ownCertFile, ownCertKeyFile, der, key); err != nil {
		return tls.Certificate{}, err
	}
	return tls.LoadX509KeyPair(filepath.Join(dir, ownCertFile), filepath.Join(dir, ownCertKeyFile))
}

// writePEM writes a certificate (readable by all) and its key (by its
// owner alone), each to a temporary file renamed into place, so that a
// reader never sees half of one.
func writePEM(dir, certName, keyName string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(dir, keyName, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFile(dir, certName, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeFile(dir, name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // once renamed, there is nothing to remove
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}

// serial is a random certificate serial number (RFC 5280 §4.1.2.2).
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
