package intents

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClassifyFromSysfs(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) {
		require.NoError(t, os.MkdirAll(filepath.Join(append([]string{root}, parts...)...), 0o755))
	}
	mk("wlan0", "wireless")
	mk("wlp2s0", "phy80211")
	mk("mhi0")
	require.NoError(t, os.WriteFile(filepath.Join(root, "mhi0", "uevent"), []byte("INTERFACE=mhi0\nDEVTYPE=wwan\n"), 0o644))
	mk("enp3s0", "device")
	mk("veth0")
	old := sysfsRoot
	sysfsRoot = root
	t.Cleanup(func() { sysfsRoot = old })
	for name, want := range map[string]InterfaceType{
		"wlan0": TypeWifi, "wlp2s0": TypeWifi, "mhi0": TypeCellular, "rmnet_data0": TypeCellular,
		"wwan0": TypeCellular, "enp3s0": TypeWired, "veth0": TypeOther,
	} {
		assert.Equal(t, want, classify(net.Interface{Name: name}), name)
	}
	assert.Equal(t, TypeLoopback, classify(net.Interface{Name: "lo", Flags: net.FlagLoopback}))
}

func TestLinkDNSFromSystemdResolved(t *testing.T) {
	if !inInitNetns() {
		t.Skip("systemd-resolved state is read only in the initial network namespace")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "3"), []byte("# This is private data. Do not parse.\nLLMNR=yes\n"+
		"SERVERS=192.0.2.53 2001:db8::53#dns.example 192.0.2.54:5353 bogus\nDOMAINS=corp.example ~routing.example\n"), 0o644))
	old := resolvedNetif
	resolvedNetif = dir
	t.Cleanup(func() { resolvedNetif = old })
	lr, ok := linkDNS(3)
	require.True(t, ok)
	assert.Equal(t, "[192.0.2.53:53 [2001:db8::53]:53 192.0.2.54:5353]", fmtAny(lr.servers))
	assert.Equal(t, []string{"corp.example"}, lr.search)
	assert.Empty(t, lr.dotMode, "no DNSOverTLS= for the link")
	_, ok = linkDNS(4)
	assert.False(t, ok)

	// resolved's DNSOverTLS= for a link: its servers over TLS, port 853
	// unless one was given, with their names; strict unless opportunistic.
	for mode, fallback := range map[string]bool{"yes": false, "opportunistic": true} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "5"), []byte("SERVERS=192.0.2.53 2001:db8::53#dns.example 192.0.2.54:5353\n"+
			"DNS_OVER_TLS="+mode+"\n"), 0o644))
		lr, ok = linkDNS(5)
		require.True(t, ok)
		assert.Equal(t, mode, lr.dotMode)
		assert.Equal(t, []EncryptedDNS{{Addr: netip.MustParseAddrPort("192.0.2.53:853")},
			{Addr: netip.MustParseAddrPort("[2001:db8::53]:853"), Name: "dns.example"},
			{Addr: netip.MustParseAddrPort("192.0.2.54:5353")}}, lr.tls)
		m := &Manager{}
		p := &Path{Index: 5}
		m.pathDNS(p, nil, nil)
		assert.Equal(t, "systemd-resolved", p.DNSSource)
		assert.Equal(t, lr.tls, p.DNSOverTLS, mode)
		assert.Equal(t, fallback, p.DNSPlaintextFallback, mode)
		// A path's configuration replaces them.
		p = &Path{Index: 5}
		m.pathDNS(p, &PathConfig{DNSOverHTTPS: []string{"https://192.0.2.9/dns-query"}}, nil)
		assert.Empty(t, p.DNSOverTLS)
		assert.Len(t, p.DNSOverHTTPS, 1)
		assert.False(t, p.DNSPlaintextFallback)
	}
}
